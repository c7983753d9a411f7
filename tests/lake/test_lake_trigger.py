"""The trigger across the fleet: two daemons register the same agent, one at a time watches it (its lease in the
lake's Postgres), reading every daemon's runs from the lake; when the watching daemon is killed the other takes
the lease and goes on watching from the lake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_runs import emit_run
from test_trigger import trigger_polls, wait_for

from lousho.observe import instrument
from lousho.observe.client.process import DaemonProcess, start_daemon

pytestmark = [pytest.mark.system, pytest.mark.slow]


def _fleet_daemon(tmp_path: Path, lake_url: str, name: str) -> tuple[DaemonProcess, Path]:
    agent = tmp_path / name / "coder"  # each host has its own copy of the agent's directory
    agent.mkdir(parents=True)
    (agent / "instructions.md").write_text("Answer tersely.\n")
    (tmp_path / "check.py").write_text("def check(case, output):\n    return None\n")
    daemon = start_daemon(tmp_path / name / "observe.duckdb", "--lake", lake_url, "--lake-data",
                          str(tmp_path / "lake-data"), "--lake-name", name, "--lake-every", "0.2",
                          "--agent", f"coder={agent}:{tmp_path / 'check.py'}", "--trigger-interval", "0.3",
                          "--trigger-settle", "0", "--trigger-reference-runs", "20",
                          "--trigger-reference-hours", "0", "--trigger-runs-per-day", "300",
                          env={"LOUSHO_IMPROVE": "off"})
    return daemon, agent / ".lousho" / "trigger-state.json"


def _watched(state: Path) -> int:
    if not state.exists():
        return -1
    doc = json.loads(state.read_text())
    return doc["reference_runs"] + doc["runs_watched"]


def test_one_daemon_watches_the_agent_over_every_daemons_runs_and_another_takes_over_when_it_dies(
        tmp_path, lake_url):
    (d0, state0), (d1, state1) = (_fleet_daemon(tmp_path, lake_url, name) for name in ("d0", "d1"))
    daemons, states = [d0, d1], [state0, state1]
    try:
        for i, daemon in enumerate(daemons):  # 30 runs to each daemon: the agent's runs are only whole in the lake
            provider = instrument("coder", daemon.url)
            for n in range(30):
                emit_run(provider, f"run-{i}-{n:02d}", outcome="fail" if n % 10 == 3 else "pass")
            assert provider.force_flush()
            provider.shutdown()
        wait_for(lambda: max(_watched(s) for s in states) == 60, timeout=60)
        holder = max(range(2), key=lambda i: _watched(states[i]))
        other = 1 - holder
        assert trigger_polls(daemons[holder].url) > 0
        assert trigger_polls(daemons[other].url) == 0 and not states[other].exists()

        daemons[holder].kill()  # SIGKILL: its Postgres session ends, and with it the lease
        wait_for(lambda: _watched(states[other]) == 60, timeout=30)
        assert trigger_polls(daemons[other].url) > 0
        assert json.loads(states[other].read_text())["revision"] == "rev-1"
    finally:
        for daemon in daemons:
            if daemon.process.poll() is None:
                assert daemon.stop() == 0, "\n".join(daemon.output[-30:])
