"""An agent that sends one burst: SPANS spans created as fast as one process can, through ``instrument()``.

Run as a child process, so its SDK has the process and its GIL to itself, as an agent's does::

    python tests/observe/burst_agent.py ENDPOINT SERVICE SPANS

An ``invoke_agent`` span per run with a ``chat`` and an ``execute_tool`` child, until SPANS are made; then
``provider.shutdown()``, which flushes the queue. Prints one JSON line: spans created, and how many were still
queued when creating ended.
"""

from __future__ import annotations

import json
import sys

from opentelemetry.trace import SpanKind

from lousho.observe import instrument


def main(endpoint: str, service: str, spans: int) -> None:
    provider = instrument(service, endpoint)
    tracer = provider.get_tracer("lousho.burst")
    made = run = 0
    while made < spans:
        with tracer.start_as_current_span("invoke_agent coder", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder", "lousho.run.id": f"{service}-{run}",
        }):
            made += 1
            if made < spans:
                with tracer.start_as_current_span("chat gpt-test", kind=SpanKind.CLIENT, attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-test",
                    "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 80,
                }):
                    made += 1
            if made < spans:
                with tracer.start_as_current_span("execute_tool read_file", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                }):
                    made += 1
        run += 1
    queued = len(provider._active_span_processor._span_processors[0]._batch_processor._queue)
    provider.shutdown()
    print(json.dumps({"created": made, "queued_at_end": queued}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
