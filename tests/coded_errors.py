"""Run a lousho entry point that must fail, and check it failed the way users are promised."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def start_fails(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m lousho.observe`` on ``db`` (free ports unless ``args`` say otherwise), to its exit."""
    return subprocess.run(
        [sys.executable, "-m", "lousho.observe", "--db", str(db), "--port", "0", "--grpc-port", "0", *args],
        capture_output=True, text=True, timeout=120,
    )


def lousho(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True, timeout=120)


def assert_coded(result: subprocess.CompletedProcess[str], code: str, hint_part: str, exit_code: int = 1) -> None:
    """Exactly ``error CODE: message`` and ``hint: ...`` on stderr, no traceback, the exit code."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == exit_code, result.stderr
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith(f"error {code}: "), result.stderr
    assert lines[1].startswith("hint: ") and hint_part in lines[1], result.stderr
