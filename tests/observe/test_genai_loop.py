"""The improvement loop on an agent with no lousho attribute: its failures become cases with the user's input,
its sessions are one row per conversation, and the daemon's trigger fires on its regression.

The agent is tests/genai/agent.py on the real openai client and a real instrumentation, against `lousho models
serve-scripted`, exporting OTLP to a daemon child process.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_support import sql
from genai_support import drive, lousho, model, wait_for_runs  # noqa: F401 (model is a fixture)

from lousho.analysis import cases_from_failures, pass_rates, runs
from lousho.observe import connect
from lousho.observe.client.process import DaemonProcess, start_daemon


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.parametrize("instrumentation", ("openinference", "otel-genai"))
def test_failures_of_an_uninstrumented_agent_become_cases_with_the_users_input(
        tmp_path, model, shared_daemon, instrumentation):  # noqa: F811
    agent = f"cases-{instrumentation}"
    steps = [
        {"input": "what is the weather in Paris?", "verdict": "fail"},
        {"input": "fault: weather in Rome?", "verdict": None},
        {"input": "what is the weather in Oslo?", "verdict": "pass"},
        {"input": "What is the  weather in Paris?", "verdict": "fail"},  # the same case, written differently
        {"input": "fault: weather in Rome?", "verdict": None},
    ]
    drive(tmp_path, model, shared_daemon, instrumentation, steps, "--agent", agent, "--version", "v7")
    assert len(wait_for_runs(shared_daemon.url, agent, 5)) == 5
    store = connect(shared_daemon.url)
    try:
        cases = cases_from_failures(store, agent)
        frame = runs(store, agent=agent)
    finally:
        store.close()
    # pass_rates sums cost as it sums tokens: the gate's cost rule can be read in dollars.
    [rate] = pass_rates(frame).iter_rows(named=True)
    assert (rate["harness_revision"], rate["runs"], rate["passes"]) == ("v7", 3, 1)
    assert rate["cost_usd"] == pytest.approx(frame.filter(frame["passed"].is_not_null())["cost_usd"].sum())
    assert rate["cost_per_passing_run"] == pytest.approx(rate["cost_usd"])
    rows = {row["input"].lower().replace("  ", " "): row for row in cases.iter_rows(named=True)}
    assert set(rows) == {"what is the weather in paris?", "fault: weather in rome?"}
    assert all(row["count"] == 2 and row["revision"] == "v7" for row in rows.values())
    assert rows["what is the weather in paris?"]["failed_outputs"] == ["The weather: sunny in Paris."] * 2
    assert all("InternalServerError" in error for error in rows["fault: weather in rome?"]["errors"])


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.parametrize("instrumentation", ("openinference", "pydantic-ai"))
def test_turns_of_one_conversation_across_runs_are_one_session(tmp_path, model, shared_daemon, instrumentation):  # noqa: F811
    agent = f"sessions-{instrumentation}"
    session = f"conversation-{instrumentation}"
    steps = [
        {"input": "what is the weather in Paris?", "verdict": "pass", "session": session},
        {"input": "what is the weather in Lyon?", "verdict": "fail", "session": session},
        {"input": "fault: weather in Nice?", "verdict": None, "session": session},
        {"input": "what is the weather in Oslo?", "verdict": "pass", "session": f"other-{instrumentation}"},
    ]
    drive(tmp_path, model, shared_daemon, instrumentation, steps, "--agent", agent)
    runs = wait_for_runs(shared_daemon.url, agent, 4)
    assert [r["conversation_id"] for r in runs] == [session] * 3 + [f"other-{instrumentation}"]
    listed = lousho("sessions", "--url", shared_daemon.url, "--agent", agent, "--json")
    assert listed.returncode == 0, listed.stderr
    sessions = {s["session_id"]: s for s in json.loads(listed.stdout)}
    assert set(sessions) == {session, f"other-{instrumentation}"}
    one = sessions[session]
    assert (one["agent"], one["turns"], one["failed"]) == (agent, 3, 2)
    assert one["run_ids"] == [r["run_id"] for r in runs[:3]]
    assert one["pass_rate"] == pytest.approx(1 / 3)
    assert one["input_tokens"] == sum(r["input_tokens"] for r in runs[:3])
    assert one["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in runs[:3]))
    assert sessions[f"other-{instrumentation}"]["turns"] == 1


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[DaemonProcess]:
    """A daemon watching agent "forecaster" (polling every 0.1 s) in a directory the cycle may edit."""
    directory = tmp_path / "forecaster"
    directory.mkdir()
    (directory / "instructions.md").write_text("Answer tersely.\n")
    (tmp_path / "check.py").write_text("def check(case, output):\n    return None\n")
    daemon = start_daemon(tmp_path / "o.duckdb", "--agent", f"forecaster={directory}:{tmp_path / 'check.py'}",
                          "--trigger", "seed", "--trigger-interval", "0.1", env={"LOUSHO_IMPROVE": "on"})
    try:
        yield daemon
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


@pytest.mark.slow
@pytest.mark.system
def test_the_trigger_fires_on_a_regression_of_an_uninstrumented_agent(tmp_path, model, watched):  # noqa: F811
    passing = [{"input": f"what is the weather in City{i}?", "verdict": "pass"} for i in range(20)]
    failing = [{"input": f"what is the weather in Town{i}?", "verdict": "fail"} for i in range(20)]
    drive(tmp_path, model, watched, "otel-genai", passing + failing, "--agent", "forecaster", "--version", "r1")
    assert len(wait_for_runs(watched.url, "forecaster", 40)) == 40
    log = tmp_path / "forecaster" / ".lousho" / "trigger.jsonl"
    deadline = time.monotonic() + 30
    while not (log.exists() and '"started"' in log.read_text()):
        assert time.monotonic() < deadline, watched.output[-20:]
        time.sleep(0.1)
    [started] = [json.loads(line) for line in log.read_text().splitlines() if '"started"' in line]
    assert (started["agent"], started["revision"]) == ("forecaster", "r1")
    assert (started["window"], started["before_passes"], started["recent_passes"]) == (20, 20, 0)
    assert sql(watched.url, "SELECT count(*) AS n FROM spans WHERE attributes::VARCHAR LIKE '%lousho.%'") == [
        {"n": 0}]
