"""`make demo` runs the main job end to end; this runs the same command, as `make demo` does."""

from __future__ import annotations

import pytest


@pytest.mark.system
@pytest.mark.slow
def test_demo_runs_end_to_end_recovers_the_killed_run_and_stops_the_daemon_cleanly(demo_run):
    out = demo_run.stdout  # the session's one demo run (tests/conftest.py), exit code 0
    assert "200 runs of the reference agent" in out
    assert "1 unfinished run" in out and "on_recovered('demo-killed'); status finished" in out
    assert "saved 3 notes" in out
    assert "sum-correct" in out  # failures grouped into cases
    assert "lousho improve: " in out and "error rate" in out  # one improvement step's card, with its error rates
    assert "cycle: applied" in out and "watcher tick: kept" in out  # the loop applies a fix; the monitor keeps it
    assert "watcher tick: rollback" in out and "(the kept edit): True" in out  # planted harm rolled back
    assert "audit: ok" in out
    assert "exit code 0" in out
    assert (demo_run.dir / "observe.duckdb").exists()
    assert "http://127.0.0.1:4318/" in out and "/agents/ledger" in out  # it ends with where to look
