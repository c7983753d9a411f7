"""Zero-code tracing: a plain ``openai`` agent with no tracing code, started under ``opentelemetry-instrument`` in
a venv holding exactly what docs/observe.md says to install (tests/frameworks/zero_code/requirements.txt, built by
``make agent-venvs``), exporting at the launcher's defaults (OTLP over gRPC) to a daemon child.

With no agent span, each model call is a run of its own, named after ``service.name`` (docs/observe.md, the
framework table): the 20 requests of the plan make 37 runs: two calls for each of the 14 that succeed and the 3
whose provider fails on the second call, one for each of the 3 whose tool raised before a second call. Prompts and
answers are opt-in content in the GenAI conventions: without ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
the runs have no input or output, as documented.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from frameworks_support import (  # noqa: F401 (weather_model is a fixture)
    MODEL,
    PROVIDER_FAILS,
    RUNS,
    SYSTEM,
    TOOL_FAILS,
    answer,
    question,
    wait_for_runs,
    weather_model,
)

from lousho.analysis.cases import cases_from_failures
from lousho.observe.client.store_client import connect

HERE = Path(__file__).parent
REPO = HERE.parent.parent
VENV_PYTHON = Path(os.environ.get("LOUSHO_ZERO_CODE_PYTHON") or REPO / ".venv-zero_code" / "bin" / "python")


def launch(tmp_path: Path, daemon, model, service: str, questions: list[str], capture: bool) -> list[dict]:
    assert VENV_PYTHON.exists(), (f"{VENV_PYTHON} is missing: run `make agent-venvs` (the agent's own venv, "
                                  "tests/frameworks/zero_code/requirements.txt)")
    plan = tmp_path / f"{service}.json"
    plan.write_text(json.dumps({"system": SYSTEM, "model": MODEL, "questions": questions}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    # What a user sets: a name, and where the daemon's gRPC port is (the launcher's default protocol).
    env |= {"OTEL_SERVICE_NAME": service, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{daemon.grpc_target}"}
    if capture:
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
    launcher = VENV_PYTHON.parent / "opentelemetry-instrument"
    done = subprocess.run([str(launcher), str(VENV_PYTHON), str(HERE / "zero_code" / "zero_code_agent.py"),
                           "--model-url", model.url, "--plan", str(plan)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.system
@pytest.mark.slow
def test_a_plain_openai_agent_under_opentelemetry_instrument_gives_a_run_per_model_call(
        tmp_path, shared_daemon, weather_model):  # noqa: F811
    service = "weather-zero-code"
    served = launch(tmp_path, shared_daemon, weather_model, service, [question(i) for i in range(RUNS)], True)
    assert [s["raised"] for s in served] == [
        "NoStationError" if i in TOOL_FAILS else "InternalServerError" if i in PROVIDER_FAILS else None
        for i in range(RUNS)]

    # One run per call, in the order the calls were made.
    calls = [(i, 0) for i in range(RUNS)] + [(i, 1) for i in range(RUNS) if i not in TOOL_FAILS]
    calls.sort()
    runs = wait_for_runs(shared_daemon.url, service, len(calls))
    assert len(runs) == len(calls) == 37
    for (i, second), run in zip(calls, runs, strict=True):
        where = f"call {second + 1} of request {i}: {run}"
        assert run["input"] == question(i), where
        assert run["model"] == MODEL and run["model_calls"] == 1 and run["tool_calls"] == 0, where
        failed = second == 1 and i in PROVIDER_FAILS
        assert (run["status"] == "error") == failed, where
        assert (run["input_tokens"] is None) == failed, where  # a call the provider failed used none
        if failed:
            assert run["error_type"].endswith("InternalServerError") and run["output"] is None, where
        elif second == 1:
            assert run["output"] == answer(i, tool_error_handled=False), where
        else:  # the first call asked for the tool: no text
            assert run["output"] is None, where
        # Its system prompt, tools and model: one derived revision for every call.
        assert run["harness_revision"] == runs[0]["harness_revision"], where
        assert run["harness_revision"].startswith("auto:") and run["revision_source"] == "derived", where

    cases = cases_from_failures(connect(shared_daemon.url), service)
    assert sorted(cases["input"].to_list()) == sorted(question(i) for i in PROVIDER_FAILS)


@pytest.mark.system
def test_without_the_capture_setting_zero_code_runs_have_no_input_or_output(
        tmp_path, shared_daemon, weather_model):  # noqa: F811
    service = "weather-zero-code-default"
    launch(tmp_path, shared_daemon, weather_model, service, [question(0)], False)
    runs = wait_for_runs(shared_daemon.url, service, 2)
    assert len(runs) == 2
    assert all(r["input"] is None and r["output"] is None and r["model_calls"] == 1 for r in runs), runs
