"""Helpers of the GenAI instrumentation tests: the scripted weather model, the agent child process, polling.

Not a conftest.py (tests import helpers by module name); test modules import the ``model`` fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_support import sql

from lousho.models.process import ScriptedProcess, start_scripted
from lousho.observe.client.process import DaemonProcess

GENAI = Path(__file__).parent / "genai"
AGENT = GENAI / "agent.py"
INSTRUMENTATIONS = ("openinference", "traceloop", "otel-genai", "pydantic-ai")


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedProcess]:
    process = start_scripted(GENAI / "weather_model.py")
    try:
        yield process
    finally:
        assert process.stop() == 0, "\n".join(process.output[-20:])


def drive(tmp_path: Path, model: ScriptedProcess, daemon: DaemonProcess, instrumentation: str, steps: list[dict],
          *extra: str) -> list[dict]:
    """Run the agent as a child process (each instrumentation patches openai for the whole process)."""
    plan_file = tmp_path / f"plan-{instrumentation}-{time.monotonic_ns()}.json"
    plan_file.write_text(json.dumps(steps))
    done = subprocess.run([sys.executable, str(AGENT), "--instrumentation", instrumentation, "--model-url", model.url,
                           "--otlp", daemon.url, "--plan", str(plan_file), *extra],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def wait_for_runs(url: str, agent: str, n: int, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        rows = sql(url, "SELECT * FROM runs WHERE agent = ? ORDER BY started_ns", [agent])
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def lousho(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True, timeout=60)
