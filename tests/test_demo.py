"""`make demo` runs the main job end to end; this runs the same command, as `make demo` does."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.system
@pytest.mark.slow
def test_demo_runs_end_to_end_recovers_the_killed_run_and_stops_the_daemon_cleanly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "lousho", "demo", "--dir", str(tmp_path / "demo"), "--runs", "200"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "200 runs of the reference agent" in out
    assert "1 unfinished run" in out and "on_recovered('demo-killed'); status finished" in out
    assert "saved 3 notes" in out
    assert "sum-correct" in out  # failures grouped into cases
    assert "lousho improve: " in out and "error rate" in out  # one improvement step's card, with its error rates
    assert "cycle: applied" in out and "watcher tick: kept" in out  # the loop applies a fix; the monitor keeps it
    assert "watcher tick: rollback" in out and "(the kept edit): True" in out  # planted harm rolled back
    assert "audit: ok" in out
    assert "exit code 0" in out
    assert (tmp_path / "demo" / "observe.duckdb").exists()
