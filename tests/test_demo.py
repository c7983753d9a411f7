"""`make demo` runs the main job end to end; this runs the same command on a smaller workload."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.system
@pytest.mark.slow
def test_demo_runs_end_to_end_and_stops_the_daemon_cleanly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "lousho", "demo", "--dir", str(tmp_path / "demo"), "--runs", "60"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "runs failed their check" in result.stdout
    assert "pass_rate" in result.stdout
    assert "exit code 0" in result.stdout
    assert (tmp_path / "demo" / "observe.duckdb").exists()
