"""An order-desk agent on the plain ``openai`` SDK: no lousho framework, one tool loop.

It reads its instructions and skills from its harness directory (``harness/``) on every run, so an edit the
improve loop applies there takes effect on the next run. Its traces are standard OpenTelemetry: the OpenTelemetry
GenAI instrumentation for OpenAI (``opentelemetry-instrumentation-genai-openai``) records each model call, and
``lousho.observe.agent_run`` opens the run's root span with the agent's name, the harness revision, the case
and the verdict of ``check.py``. With ``--observe`` and that package missing it stops with a message (exit 2)
rather than send runs without their model calls; ``--no-instrumentation`` sends the root spans alone.

    python agent.py ask "where is order A-1?"          # one question
    python agent.py traffic --kind usual --runs 40     # live traffic, each run scored by check.py

The model is whatever ``OpenAI()`` reaches: ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (the SDK's own
variables), and ``ORDER_DESK_MODEL``. ``--observe URL`` sends the traces to a lousho daemon.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from openai import OpenAI

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "harness"
AGENT_NAME = "order-desk"
MAX_STEPS = 4

# The shop's orders: the lookup tool's data (check.py judges answers against it too).
ORDERS = {
    "A-1": ("shipped", "2026-12-03"), "A-2": ("processing", "2026-12-09"), "A-3": ("delivered", "2026-11-28"),
    "B-1": ("shipped", "2026-12-04"), "B-2": ("processing", "2026-12-11"), "B-3": ("lost", "unknown"),
    "C-1": ("delivered", "2026-11-30"), "C-2": ("shipped", "2026-12-05"),
}

TOOLS = [
    {"type": "function", "function": {
        "name": "lookup_order", "description": "Look up an order's status and expected delivery date by its id.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {
        "name": "escalate", "description": "Hand an order to a person, with a note.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "note": {"type": "string"}},
                       "required": ["order_id", "note"]}}},
]


def lookup_order(order_id: str) -> str:
    order = ORDERS.get(order_id)
    if order is None:
        return json.dumps({"error": f"no order has the id {order_id!r}"})
    return json.dumps({"order_id": order_id, "status": order[0], "eta": order[1]})


def escalate(order_id: str, note: str, *, dry_run: bool) -> str:
    """The one tool with a side effect: a line in outbox.jsonl. A dry run (the loop's probes) writes nothing."""
    if dry_run:
        return f"ok (dry run: {order_id} was not escalated)"
    with (HERE / "outbox.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"order_id": order_id, "note": note}) + "\n")
    return f"escalated {order_id}"


def system_prompt(harness: Path) -> str:
    """instructions.md, then every skill's SKILL.md: the whole harness, read fresh for each run."""
    text = (harness / "instructions.md").read_text(encoding="utf-8")
    for skill in sorted((harness / "skills").glob("*/SKILL.md")):
        text += f"\n\n## Skill: {skill.parent.name}\n{skill.read_text(encoding='utf-8')}"
    return text


def answer(client: OpenAI, model: str, harness: Path, question: str, *, dry_run: bool = False) -> dict[str, Any]:
    """One run: a fresh conversation (nothing carries over between runs). Returns output, tokens and requests."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt(harness)},
                                      {"role": "user", "content": question}]
    tokens = requests = 0
    for _ in range(MAX_STEPS):
        response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        requests += 1
        tokens += response.usage.total_tokens if response.usage else 0
        message = response.choices[0].message
        if not message.tool_calls:
            return {"output": message.content or "", "tokens": tokens, "requests": requests}
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            args = json.loads(call.function.arguments or "{}")
            if call.function.name == "lookup_order":
                result = lookup_order(str(args.get("order_id", "")))
            else:
                result = escalate(str(args.get("order_id", "")), str(args.get("note", "")), dry_run=dry_run)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return {"output": "Sorry, I could not finish looking that up.", "tokens": tokens, "requests": requests}


def run(question: str, *, tracer_provider: Any = None, case_id: str | None = None,
        harness: Path = HARNESS) -> str:
    """One live run, traced and scored: the root span carries the harness revision the loop uses."""
    from check import check  # the same check the loop judges probes with

    from lousho.observe import agent_run

    with agent_run(AGENT_NAME, harness=harness, input=question, case_id=case_id,
                   tracer_provider=tracer_provider) as r:
        output = answer(OpenAI(), model(), harness, question)["output"]
        r.output(output)
        r.verdict(check(question, output))
    return output


def model() -> str:
    return os.environ.get("ORDER_DESK_MODEL", "gpt-4o-mini")


def questions(kind: str, count: int, seed: int) -> list[tuple[str, str]]:
    """Live traffic: ``usual`` customers write order ids as printed (A-1); ``new`` ones, from a new
    checkout page, write them in lower case (a-1): the planted regression."""
    rng = random.Random(seed)
    ids = sorted(ORDERS)
    out = []
    for _ in range(count):
        order = rng.choice(ids)
        if kind == "usual":
            out.append((f"Where is order {order}?", order))
        else:
            out.append((f"hi, where is my order {order.lower()}? thanks", order.lower()))
    return out


# The GenAI instrumentation for OpenAI that imports with today's openai (opentelemetry-instrumentation-openai-v2
# no longer does). Prompts and answers in its spans are opt-in: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT.
INSTRUMENTATION = ("opentelemetry-instrumentation-genai-openai", "opentelemetry.instrumentation.genai.openai")


def tracing(observe: str | None, instrumentation: bool = True) -> Any:
    """A standard OTel SDK setup: an OTLP/HTTP exporter to the daemon and the OpenAI instrumentation."""
    if observe is None:
        return None
    instrumentor = openai_instrumentor() if instrumentation else None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": AGENT_NAME}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{observe.rstrip('/')}/v1/traces")))
    if instrumentor is not None:
        os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
        instrumentor.instrument(tracer_provider=provider)
    return provider


def openai_instrumentor() -> Any:
    """The instrumentation, or exit 2 saying what to install: an ImportError swallowed here would send runs with
    no model call in them, and nothing would say why."""
    package, module = INSTRUMENTATION
    try:
        return importlib.import_module(module).OpenAIInstrumentor()
    except ImportError as e:
        sys.exit(f"order-desk: cannot import the OpenAI instrumentation ({module}): {type(e).__name__}: {e}\n"
                 f"hint: pip install {package} (in this Python: {sys.executable}), or pass --no-instrumentation "
                 "to send the run spans without the model calls")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--observe", default=os.environ.get("LOUSHO_URL"), help="the lousho daemon's URL")
    parser.add_argument("--no-instrumentation", action="store_true",
                        help="send only the run spans, without the OpenAI instrumentation's model calls")
    commands = parser.add_subparsers(dest="command", required=True)
    ask = commands.add_parser("ask")
    ask.add_argument("question")
    traffic = commands.add_parser("traffic")
    traffic.add_argument("--kind", choices=["usual", "new"], default="usual")
    traffic.add_argument("--runs", type=int, default=20)
    traffic.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    provider = tracing(args.observe, instrumentation=not args.no_instrumentation)
    try:
        if args.command == "ask":
            print(run(args.question, tracer_provider=provider))
            return
        from check import check

        passed = 0
        for question, case_id in questions(args.kind, args.runs, args.seed):
            output = run(question, tracer_provider=provider, case_id=case_id)
            passed += check(question, output).status == "pass"
        print(f"{args.runs} {args.kind} runs, {passed} passed their check")
    finally:
        if provider is not None:
            provider.shutdown()


if __name__ == "__main__":
    main()
