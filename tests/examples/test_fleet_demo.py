"""``make demo-fleet`` as a test: three daemons join one lake and one query sees every daemon's runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).parents[2] / "examples" / "fleet" / "demo.py"


@pytest.mark.system
@pytest.mark.slow
def test_the_fleet_demo_shows_one_query_over_three_daemons(tmp_path):
    out = subprocess.run([sys.executable, str(DEMO), "--dir", str(tmp_path / "fleet"), "--runs", "10"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4. each daemon's /v1/sql?scope=lake answers the same: 30 runs from 3 hosts" in out.stdout
    assert "│ coder  │ 15" in out.stdout and "│ triage │ 15" in out.stdout
