"""Any OpenTelemetry agent is a run: the real GenAI instrumentations (OpenInference, Traceloop, the OTel GenAI
instrumentation for OpenAI, Pydantic AI) each drive the real openai client against `lousho models
serve-scripted`, exporting OTLP to a daemon child process, with no `lousho.*` attribute anywhere.

Each agent run (tests/genai/agent.py) is an `invoke_agent` root, a model call asking for a tool, the tool, a
second model call and an evaluation event; every fifth run's provider fails on the second call.
"""

from __future__ import annotations

import json

import pytest
from daemon_support import sql
from genai_support import INSTRUMENTATIONS, drive, lousho, model, wait_for_runs  # noqa: F401 (model is a fixture)


def plan(n: int) -> list[dict]:
    """n runs: every fifth errors (provider 500 after the tool), every fifth + 1 fails its evaluation."""
    steps = []
    for i in range(n):
        if i % 5 == 0:
            steps.append({"input": f"fault: weather in City{i}?", "verdict": None})
        else:
            steps.append({"input": f"what is the weather in City{i}?", "verdict": "fail" if i % 5 == 1 else "pass"})
    return steps


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.parametrize("instrumentation", INSTRUMENTATIONS)
def test_twenty_agent_runs_are_twenty_runs_with_failures_models_tokens_and_cost(
        tmp_path, model, shared_daemon, instrumentation):  # noqa: F811
    agent = f"weather-{instrumentation}"
    steps = plan(20)
    extra = ["--agent", agent, "--service", f"svc-{instrumentation}"]
    if instrumentation != "pydantic-ai":
        extra += ["--version", "v1"]
    outcomes = drive(tmp_path, model, shared_daemon, instrumentation, steps, *extra)
    assert [o["raised"] is not None for o in outcomes] == [s["input"].startswith("fault") for s in steps]

    runs = wait_for_runs(shared_daemon.url, agent, 20)
    assert len(runs) == 20
    assert [r["input"] for r in runs] == [s["input"] for s in steps]
    assert all(r["implicit"] for r in runs)
    failed_inputs = {s["input"] for s in steps if s["input"].startswith("fault") or s["verdict"] == "fail"}
    assert len(failed_inputs) == 8
    assert {r["input"] for r in runs if r["status"] == "error" or r["passed"] is False} == failed_inputs
    for run in runs:
        assert run["model"] == "gpt-4o-mini"
        # Errors too: the failing call comes after one that answered, and its tokens count.
        assert run["input_tokens"] > 0 and run["output_tokens"] > 0
        assert run["cost_usd"] > 0 and run["cost_source"] in ("reported", "price-table")
        assert run["model_calls"] == 2 and run["tool_calls"] == 1
        if run["status"] == "error":
            assert (run["error_type"] or "").endswith(("InternalServerError", "ModelServerError"))
            assert run["output"] is None
        else:
            assert run["output"] == f"The weather: sunny in {run['input'].split('weather in ')[1].rstrip('?')}."
        if instrumentation == "pydantic-ai":  # no gen_ai.agent.version: derived from its tools and model
            assert run["harness_revision"] == runs[0]["harness_revision"]
            assert run["harness_revision"].startswith("auto:") and run["revision_source"] == "derived"
        else:
            assert run["harness_revision"] == "v1" and run["revision_source"] == "version"
    # The span that failed carries the error type its instrumentation gave.
    error_spans = sql(shared_daemon.url, "SELECT s.error_type FROM spans s JOIN runs r ON s.trace_id = r.last_trace_id "
                      "WHERE r.agent = ? AND s.status_code = 'ERROR'", [agent])
    assert error_spans and all(row["error_type"] for row in error_spans)

    listed = lousho("runs", "--url", shared_daemon.url, "--agent", agent, "--failed", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {r["run_id"] for r in json.loads(listed.stdout)} == {
        r["run_id"] for r in runs if r["input"] in failed_inputs}


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.parametrize("instrumentation", ("openinference", "traceloop", "otel-genai"))
def test_model_calls_with_no_agent_span_are_runs_named_after_the_service(
        tmp_path, model, shared_daemon, instrumentation):  # noqa: F811
    service = f"bare-{instrumentation}"
    steps = [{"input": f"hello {i}", "verdict": None} for i in range(3)]
    drive(tmp_path, model, shared_daemon, instrumentation, steps, "--no-root", "--service", service)
    runs = wait_for_runs(shared_daemon.url, service, 3)
    assert sorted(r["input"] for r in runs) == ["hello 0", "hello 1", "hello 2"]
    assert all(r["model_calls"] == 1 and r["output"] == r["input"].replace("hello", "echo: hello") for r in runs)
    assert all(r["model"] == "gpt-4o-mini" and r["input_tokens"] > 0 for r in runs)
