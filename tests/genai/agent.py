"""An agent on the real ``openai`` SDK, traced by one real GenAI instrumentation, exporting OTLP to a daemon.

Run as a child process (each instrumentation patches the openai client for the whole process)::

    python tests/genai/agent.py --instrumentation openinference --model-url URL --otlp URL --plan PLAN.json

The plan is a JSON list of runs, each ``{"input": str, "verdict": "pass" | "fail" | null, "session": str | null,
"tool_error": bool}`` (``tool_error``: the tool fails once and the agent handles it).
A run is an ``invoke_agent`` root span (for the openai-SDK flavours built here with the GenAI attributes; for
Pydantic AI its own), a model call that asks for the ``get_weather`` tool, the tool, a second model call, and a
``gen_ai.evaluation.result`` event carrying the verdict. An input starting with "fault" makes the provider
fail: the run ends with the error. No span carries a ``lousho.*`` attribute. ``--no-root`` makes bare model
calls with no agent span at all. Prints one JSON line per run: its trace id and whether it raised.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

INSTRUMENTATIONS = ("openinference", "traceloop", "otel-genai", "pydantic-ai")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


NO_TOOLS = False  # --no-tools: the SDK flavours' model calls offer no tool


def get_weather(city: str) -> str:
    return f"sunny in {city}"


def evaluation(span: trace.Span, verdict: str) -> None:
    span.add_event("gen_ai.evaluation.result", {
        "gen_ai.evaluation.name": "answer_correct",
        "gen_ai.evaluation.score.value": 1.0 if verdict == "pass" else 0.0,
        "gen_ai.evaluation.score.label": verdict,
    })


def instrument(name: str, provider: TracerProvider) -> None:
    if name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif name == "traceloop":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif name == "otel-genai":
        # Off by default: prompts and answers are opt-in content in the GenAI conventions.
        os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_and_event")
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
        OpenAIInstrumentor().instrument(tracer_provider=provider)
    else:
        from pydantic_ai import Agent
        from pydantic_ai.models.instrumented import InstrumentationSettings
        Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))


def session_context(name: str, session: str | None) -> Any:
    """The instrumentation's own way to tag a conversation, where it has one."""
    import contextlib
    if session is None:
        return contextlib.nullcontext()
    if name == "openinference":
        from openinference.instrumentation import using_session
        return using_session(session)
    return contextlib.nullcontext()


def sdk_run(client: Any, tracer: trace.Tracer, args: argparse.Namespace, step: dict[str, Any]) -> str:
    """One agent run on the openai SDK with a GenAI ``invoke_agent`` root span."""
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": args.agent,
                  "gen_ai.provider.name": "openai", "gen_ai.request.model": args.model}
    if args.version:
        attributes["gen_ai.agent.version"] = args.version
    if step.get("session") and args.instrumentation != "openinference":
        attributes["gen_ai.conversation.id"] = step["session"]
    name = f"invoke_agent {args.agent}"
    if args.root == "chain":  # an OpenInference chain root (LangGraph's, LlamaIndex's): no agent span
        attributes = {"openinference.span.kind": "CHAIN", "input.value": step["input"]}
        name = args.agent
    with tracer.start_as_current_span(name, kind=SpanKind.INTERNAL, attributes=attributes) as root:
        answer = converse(client, tracer, args.model, step["input"], args.system, bool(step.get("tool_error")))
        if step.get("verdict"):
            evaluation(root, step["verdict"])
        return format(root.get_span_context().trace_id, "032x") if answer is not None else ""


def converse(client: Any, tracer: trace.Tracer | None, model: str, text: str, system: str | None = None,
             tool_error: bool = False) -> str | None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    tools = {} if NO_TOOLS else {"tools": TOOLS}
    reply = client.chat.completions.create(model=model, messages=messages, **tools)
    message = reply.choices[0].message
    if not message.tool_calls:
        return message.content
    messages.append({"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in message.tool_calls]})
    for call in message.tool_calls:
        city = json.loads(call.function.arguments)["city"]
        if tracer is None:
            result = get_weather(city)
        else:
            try:
                with tracer.start_as_current_span(f"execute_tool {call.function.name}", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.function.name,
                        "gen_ai.tool.call.id": call.id}):
                    if tool_error:
                        raise TimeoutError("the weather service timed out")
                    result = get_weather(city)
            except TimeoutError:
                # Handled as frameworks do: the tool's error goes back to the model, then the real call.
                result = get_weather(city)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return client.chat.completions.create(model=model, messages=messages, **tools).choices[0].message.content


def pydantic_ai_runner(args: argparse.Namespace, tracer: trace.Tracer) -> Callable[[dict[str, Any]], str]:
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    client = AsyncOpenAI(base_url=args.model_url, api_key="sk-test", max_retries=0)
    model = OpenAIChatModel(args.model, provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name=args.agent, system_prompt=args.system or ())
    seen: dict[str, trace.SpanContext] = {}

    @agent.tool_plain(name="get_weather")
    def weather(city: str) -> str:
        seen["context"] = trace.get_current_span().get_span_context()
        if seen.pop("fail_tool", False):
            # Pydantic AI handles it: the model is asked again, the tool's span ends in ERROR.
            from pydantic_ai import ModelRetry
            raise ModelRetry("the weather service timed out")
        return get_weather(city)

    def run(step: dict[str, Any]) -> str:
        seen.clear()
        seen["fail_tool"] = bool(step.get("tool_error"))
        kwargs = {"conversation_id": step["session"]} if step.get("session") else {}
        agent.run_sync(step["input"], **kwargs)
        context = seen["context"]
        if step.get("verdict"):
            # The verdict of a run that has ended: an evaluation span in the run's trace carries the event.
            parent = trace.set_span_in_context(trace.NonRecordingSpan(context))
            with tracer.start_as_current_span("evaluate answer_correct", context=parent) as span:
                evaluation(span, step["verdict"])
        return format(context.trace_id, "032x")

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instrumentation", choices=INSTRUMENTATIONS, required=True)
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--otlp", required=True, help="the daemon's base URL")
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--agent", default="weather-agent")
    parser.add_argument("--version", default=None, help="gen_ai.agent.version (not for pydantic-ai: it sets none)")
    parser.add_argument("--service", default="weather-service", help="the resource's service.name")
    parser.add_argument("--model", default="gpt-4o-mini")
    parser.add_argument("--no-root", action="store_true", help="bare model calls, no agent span")
    parser.add_argument("--no-tools", action="store_true", help="model calls without tools (not for pydantic-ai)")
    parser.add_argument("--system", default=None, help="the agent's system prompt")
    parser.add_argument("--root", choices=("agent", "chain"), default="agent", help="the SDK flavours' root span")
    args = parser.parse_args(argv)
    global NO_TOOLS
    NO_TOOLS = args.no_tools

    provider = TracerProvider(resource=Resource.create({"service.name": args.service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=args.otlp.rstrip("/") + "/v1/traces")))
    trace.set_tracer_provider(provider)
    instrument(args.instrumentation, provider)
    tracer = provider.get_tracer("weather-agent")
    plan = json.loads(args.plan.read_text())

    if args.instrumentation == "pydantic-ai":
        run = pydantic_ai_runner(args, tracer)
    else:
        from openai import OpenAI
        client = OpenAI(base_url=args.model_url, api_key="sk-test", max_retries=0)

        def run(step: dict[str, Any]) -> str:
            if args.no_root:
                converse(client, None, args.model, step["input"])
                return ""
            return sdk_run(client, tracer, args, step)

    for step in plan:
        raised = None
        trace_id = ""
        try:
            with session_context(args.instrumentation, step.get("session")):
                trace_id = run(step)
        except Exception as e:  # deliberate: a provider error ends the run, as in a real agent
            raised = type(e).__name__
        print(json.dumps({"input": step["input"], "trace_id": trace_id, "raised": raised}), flush=True)
    if not provider.force_flush(30_000):
        print("flush failed", file=sys.stderr)
        return 1
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
