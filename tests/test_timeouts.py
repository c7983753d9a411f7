"""Every test has a time limit (pyproject.toml, pytest-timeout): a test that hangs fails on its own, and the
processes its fixtures started are still stopped."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

HANGS = '''
import time

import pytest


@pytest.fixture
def child():
    yield
    # What a daemon fixture does on teardown: stop what it started.
    open({marker!r}, "w").write("yes")


def test_hangs(child):
    time.sleep(120)
'''


def test_the_default_limit_is_set_for_every_test(pytestconfig: pytest.Config) -> None:
    assert float(pytestconfig.getini("timeout")) == 300
    assert pytestconfig.getini("timeout_method") == "signal"


@pytest.mark.system
def test_a_test_that_hangs_fails_and_its_fixtures_still_tear_down(tmp_path: Path) -> None:
    (tmp_path / "test_hangs.py").write_text(HANGS.format(marker=str(tmp_path / "torn-down")), encoding="utf-8")
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(PYPROJECT), "--rootdir",
         str(tmp_path), "-o", "timeout=1", str(tmp_path / "test_hangs.py")],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout
    assert "Timeout" in done.stdout and "1 failed" in done.stdout, done.stdout
    assert time.monotonic() - began < 30
    assert (tmp_path / "torn-down").read_text() == "yes"
