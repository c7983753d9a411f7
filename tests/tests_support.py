"""Building blocks for tests that need run-shaped spans."""

from __future__ import annotations

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from otlp_bodies import kv


def run_root(
    trace_id: bytes,
    span_id: bytes,
    run_id: str,
    *,
    start: int,
    agent: str = "coder",
    harness: str | None = None,
    status: int = Status.STATUS_CODE_OK,
    error_type: str | None = None,
    verdict: str | None = None,
    probe: bool = False,
    case_id: str | None = None,
) -> Span:
    span = Span(trace_id=trace_id, span_id=span_id, name=f"invoke_agent {agent}", kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=start, end_time_unix_nano=start + 50_000_000,
                status=Status(code=status, message="boom" if status == Status.STATUS_CODE_ERROR else ""))
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "lousho.run.id": run_id}
    if harness:
        attrs["lousho.harness.revision"] = harness
    if error_type:
        attrs["error.type"] = error_type
    if probe:
        attrs["lousho.probe"] = True
    if case_id:
        attrs["lousho.case.id"] = case_id
    span.attributes.extend(kv(k, v) for k, v in attrs.items())
    if verdict:
        event = span.events.add(name="gen_ai.evaluation.result", time_unix_nano=start + 40_000_000)
        event.attributes.extend([kv("gen_ai.evaluation.name", "tests"), kv("gen_ai.evaluation.score.label", verdict)])
    return span
