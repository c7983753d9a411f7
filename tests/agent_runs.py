"""Emit run-shaped traces through the real OTel SDK, one run at a time, with chosen outcomes."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from lousho.observe import record_score


def emit_run(
    provider: TracerProvider,
    run_id: str,
    *,
    agent: str = "coder",
    revision: str = "rev-1",
    case: str | None = None,
    outcome: str = "pass",  # pass, fail, error, unscored
    probe: bool = False,
    healed_from: str | None = None,
    note: str | None = None,
    input_text: str | None = None,
    output: str | None = None,
    failed_check: str | None = "test_hidden",
    tokens: tuple[int, int] = (100, 20),
) -> None:
    tracer = provider.get_tracer("tests.agent_runs")
    attrs: dict = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "lousho.run.id": run_id,
        "lousho.harness.revision": revision,
        "gen_ai.input.messages": input_text if input_text is not None else f"input of {case or run_id}",
    }
    if case is not None:
        attrs["lousho.case.id"] = case
    if probe:
        attrs["lousho.probe"] = True
    if healed_from:
        attrs["lousho.run.healed_from"] = healed_from
    if note:
        attrs["lousho.heal.note"] = note
    with tracer.start_as_current_span(f"invoke_agent {agent}", attributes=attrs) as root:
        with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": tokens[0], "gen_ai.usage.output_tokens": tokens[1],
        }):
            pass
        if outcome == "error":
            root.set_attribute("error.type", "rate-limit")
            root.set_status(Status(StatusCode.ERROR, "provider said 429"))
            return
        root.set_attribute("gen_ai.output.messages", output if output is not None else f"output of {run_id}")
        if outcome == "pass":
            record_score(root, "tests", 1.0, label="pass")
        elif outcome == "fail":
            record_score(root, "tests", 0.0, label="fail", failed_check=failed_check)
