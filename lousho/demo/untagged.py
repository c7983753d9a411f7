"""The demo's second agent: one that knows nothing of lousho. It calls the model with the plain ``openai``
client and traces itself in the OpenTelemetry GenAI conventions (an ``invoke_agent`` span, ``chat`` and
``execute_tool`` spans with their messages), as any GenAI instrumentation would, with no ``lousho.*``
attribute and no ``gen_ai.agent.version``.

Its runs still get a revision: the fingerprint of its system prompt, tools and model (``auto:...``), so a
changed prompt is a new revision the trigger and the monitor can compare; and its failed runs give cases.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lousho.models.faults import Fault
from lousho.models.script import ScriptRequest
from lousho.models.scripted import ScriptedModelServer

AGENT = "weather"
MODEL = "gpt-4o-mini"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
PROMPTS = ("You answer questions about the weather.", "You answer questions about the weather, in one sentence.")
CITIES = ("Paris", "Oslo", "Lima", "Faultville", "Kyoto", "Quito", "Faultville", "Perth")


def respond(request: ScriptRequest) -> Any:
    """The weather model: a tool call, then the answer; Faultville's provider fails after the tool."""
    city = (request.last_user or "").removeprefix("What is the weather in ").rstrip("?")
    if request.last_tool is None:
        return {"content": None, "tool_calls": [{"name": "get_weather", "arguments": {"city": city}}]}
    if city == "Faultville":
        return Fault.status(500)
    return f"It is {request.last_tool.content} in {city}."


def run_untagged_agent(daemon_url: str) -> list[str]:
    """Two batches of runs, the second with a changed system prompt; returns the questions asked."""
    from openai import OpenAI, OpenAIError
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "weather-service"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{daemon_url}/v1/traces")))
    tracer = provider.get_tracer("weather-agent")
    asked = []
    try:
        with (ScriptedModelServer(respond) as model,
              OpenAI(base_url=model.url, api_key="sk-demo", max_retries=0) as client):
            for system in PROMPTS:
                for city in CITIES:
                    question = f"What is the weather in {city}?"
                    asked.append(question)
                    try:
                        _run(client, tracer, system, question)
                    except OpenAIError:
                        pass  # the run's span ended in error: a failed run
    finally:
        provider.shutdown()
    return asked


def _run(client: Any, tracer: Any, system: str, question: str) -> None:
    with tracer.start_as_current_span(f"invoke_agent {AGENT}", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT, "gen_ai.request.model": MODEL}):
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        with _chat(tracer, system, messages) as span:
            message = _answered(span, client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS))
        call = message.tool_calls[0]
        with tracer.start_as_current_span("execute_tool get_weather", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"}):
            result = "sunny"
        messages += [{"role": "assistant", "tool_calls": [call.model_dump()]},
                     {"role": "tool", "tool_call_id": call.id, "content": result}]
        with _chat(tracer, system, messages) as span:
            _answered(span, client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS))


@contextmanager
def _chat(tracer: Any, system: str, messages: list[dict[str, Any]]) -> Iterator[Any]:
    """A ``chat`` span as the GenAI conventions write one (content capture on)."""
    with tracer.start_as_current_span(f"chat {MODEL}", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": MODEL,
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": system}]),
            "gen_ai.tool.definitions": json.dumps(TOOLS),
            "gen_ai.input.messages": json.dumps([_part(m) for m in messages[1:]])}) as span:
        yield span


def _answered(span: Any, completion: Any) -> Any:
    """The answer's message, its usage and its model on the span; returns the message."""
    message = completion.choices[0].message
    span.set_attributes({"gen_ai.output.messages": json.dumps([_part(message.model_dump())]),
                         "gen_ai.response.model": completion.model,
                         "gen_ai.usage.input_tokens": completion.usage.prompt_tokens,
                         "gen_ai.usage.output_tokens": completion.usage.completion_tokens})
    return message


def _part(message: dict[str, Any]) -> dict[str, Any]:
    """A message in the GenAI conventions' parts form."""
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or []:
        parts.append({"type": "tool_call", "id": call["id"], "name": call["function"]["name"],
                      "arguments": call["function"]["arguments"]})
    if message["role"] == "tool":
        parts = [{"type": "tool_call_response", "id": message["tool_call_id"], "response": message["content"]}]
    return {"role": message["role"], "parts": parts}
