"""The CUSUM trigger in a real daemon: steady traffic after the reference starts no cycle, and a drop posted
between two looks (the newest 40 runs all pass again by the next look) starts one, because every run is fed
in order. ``/metrics`` and the agent's ``trigger-state.json`` show the statistic and the threshold. The weekly
false-trigger budget is split across the agents the daemon registers."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
from agent_runs import emit_run
from daemon_support import get, sql
from test_trigger import records, started, trigger_polls, wait_for

from lousho.kernel import cusum
from lousho.observe import instrument
from lousho.observe.client.process import start_daemon
from lousho.observe.trigger.detector import CusumConfig, calibrated, judge


def metric(url: str, name: str) -> float:
    lines = [line for line in get(url, "/metrics").body.decode().splitlines() if line.startswith(name + "{")]
    assert len(lines) == 1, lines
    assert 'agent="coder",revision="rev-1"' in lines[0]
    return float(lines[0].rsplit(" ", 1)[1])


@pytest.mark.system
def test_steady_traffic_starts_no_cycle_and_a_drop_between_two_looks_starts_one(tmp_path: Path):
    agent = tmp_path / "coder"
    agent.mkdir()
    (agent / "instructions.md").write_text("Answer tersely.\n")
    (tmp_path / "check.py").write_text("def check(case, output):\n    return None\n")
    # One look a second: the drop below is posted and stored well within one interval.
    daemon = start_daemon(tmp_path / "o.duckdb", "--agent", f"coder={agent}:{tmp_path / 'check.py'}",
                          "--trigger-interval", "1", "--trigger-settle", "0", "--trigger-reference-hours", "0",
                          "--trigger-runs-per-day", "3000", env={"LOUSHO_IMPROVE": "on"})
    provider = instrument("coder", daemon.url)
    rng = random.Random(7)
    outcomes: list[bool] = []

    def post(chunk: list[bool]) -> None:
        for passed in chunk:
            emit_run(provider, f"run-{len(outcomes)}", outcome="pass" if passed else "fail")
            outcomes.append(passed)
        assert provider.force_flush()
        wait_for(lambda: sql(daemon.url, "SELECT count(*) AS n FROM runs")[0]["n"] == len(outcomes))

    def looked() -> None:
        seen = trigger_polls(daemon.url)
        wait_for(lambda: trigger_polls(daemon.url) >= seen + 2)

    try:
        post([rng.random() < 0.9 for _ in range(999)])
        looked()
        assert metric(daemon.url, "lousho_trigger_reference_runs") == 999
        assert str(metric(daemon.url, "lousho_trigger_threshold")) == "nan"  # the reference is incomplete
        post([rng.random() < 0.9 for _ in range(501)])  # the reference's last run, then 500 steady runs
        looked()
        threshold = metric(daemon.url, "lousho_trigger_threshold")
        assert 8 < threshold < 20 and metric(daemon.url, "lousho_trigger_statistic") < threshold
        assert records(agent) == []
        state = json.loads((agent / ".lousho" / "trigger-state.json").read_text())
        assert state["rule"] == "cusum" and state["runs_watched"] == 500 and state["alarm_run"] is None
        assert state["false_trigger_per_week"] == 0.05 and "independent" in state["model"]

        # The drop: 100 runs at one in two, then 60 passes, all between two looks.
        drop = [i % 2 == 0 for i in range(100)] + [True] * 60
        post(drop)
        window = judge(outcomes)
        assert window is not None and not window.regressed  # the seeds' rule sees 40 passes at every look after
        wait_for(lambda: len(started(agent)) == 1)
        [first] = started(agent)
        assert first["rule"] == "cusum" and first["revision"] == "rev-1"
        assert first["statistic"] >= first["threshold"] and 500 < first["alarm_run"] <= 600
        assert first["model"].startswith("runs independent")
    finally:
        provider.shutdown()
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


@pytest.mark.system
def test_the_daemon_gives_each_of_its_registered_agents_an_equal_share_of_the_weekly_budget(tmp_path: Path):
    """Three agents registered: the watched agent's threshold is calibrated to 0.05 / 3 a week, the threshold
    the detector computes with three agents, not one. A 20-run reference keeps the test short."""
    (tmp_path / "check.py").write_text("def check(case, output):\n    return None\n")
    flags = []
    for name in ("coder", "writer", "planner"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "instructions.md").write_text("Answer tersely.\n")
        flags += ["--agent", f"{name}={tmp_path / name}:{tmp_path / 'check.py'}"]
    # LOUSHO_IMPROVE=off: the trigger still watches and writes its reading; it starts no cycle.
    daemon = start_daemon(tmp_path / "o.duckdb", *flags, "--trigger-interval", "0.2", "--trigger-settle", "0",
                          "--trigger-reference-runs", "20", "--trigger-reference-hours", "0",
                          "--trigger-runs-per-day", "300", env={"LOUSHO_IMPROVE": "off"})
    provider = instrument("coder", daemon.url)
    outcomes = [i % 10 != 3 for i in range(30)]
    state_file = tmp_path / "coder" / ".lousho" / "trigger-state.json"
    try:
        for i, passed in enumerate(outcomes):
            emit_run(provider, f"run-{i:02d}", outcome="pass" if passed else "fail")
        assert provider.force_flush()
        wait_for(lambda: state_file.exists() and json.loads(state_file.read_text())["runs_watched"] == 10)
        state = json.loads(state_file.read_text())
        assert state["false_trigger_per_week"] == pytest.approx(cusum.WEEKLY_BUDGET / 3)
        assert state["week_runs"] == 2100 and state["reference_runs"] == 20
        one = CusumConfig(reference_runs=20, reference_hours=0.0, runs_per_day=300)
        shared, _ = calibrated(dataclasses.replace(one, agents=3), 20, sum(outcomes[:20]), 0.0)
        alone, _ = calibrated(one, 20, sum(outcomes[:20]), 0.0)
        assert state["threshold"] == round(shared.h, 4) and shared.h > alone.h
    finally:
        provider.shutdown()
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])
