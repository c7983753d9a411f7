"""Kill the agent's process mid-run with SIGKILL; a new process resumes it and no finished tool runs again."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from agent_support import BLOCKING_TOOLS, copy_example, lousho
from daemon_support import sql


@pytest.mark.system
@pytest.mark.slow
def test_sigkilled_run_resumes_in_a_new_process_without_repeating_finished_tools(tmp_path, model, daemon):
    agent_dir = copy_example(tmp_path / "agent", tools=BLOCKING_TOOLS)
    (agent_dir / "block.flag").touch()
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    common = ["--model-url", model.url, "--model", "scripted", "--store", store, "--observe", daemon.url]
    child = subprocess.Popen(
        [sys.executable, "-m", "lousho", "agent", "run", str(agent_dir), "note: a, b, block, d",
         "--run-id", "r-crash", *common],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    effects = agent_dir / "workspace" / "effects.txt"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "block" not in (effects.read_text() if effects.exists() else ""):
        time.sleep(0.05)
    assert "block" in effects.read_text(), "the run never reached the blocking tool"
    child.send_signal(signal.SIGKILL)  # mid-tool: a, b finished; "block" is in flight
    child.communicate(timeout=30)

    pending = lousho("runs", "pending", "--store", store, "--json")
    assert '"run_id": "r-crash"' in pending.stdout and '"status": "running"' in pending.stdout

    (agent_dir / "block.flag").unlink()
    resumed = lousho("runs", "resume", "r-crash", *common, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert '"finish_reason": "stop"' in resumed.stdout and "saved 4 notes" in resumed.stdout

    lines = [line.split("\t") for line in effects.read_text().splitlines()]
    done = Counter(text for kind, _call, text in lines if kind == "done")
    started = Counter(text for kind, _call, text in lines if kind == "start")
    assert done == {"a": 1, "b": 1, "block": 1, "d": 1}
    assert started["a"] == 1 and started["b"] == 1  # finished before the kill: never run again
    assert started["block"] == 2  # mid-flight at the kill: at least once, so it ran again
    calls = {call for kind, call, text in lines if text == "block"}
    assert len(calls) == 1  # same tool call id both times: the idempotency key a tool can use

    attempts = sql(daemon.url, "SELECT trace_id, count(*) AS spans, count(*) FILTER (WHERE operation = "
                   "'invoke_agent') AS roots, list(tool_name ORDER BY start_ns) FILTER (WHERE tool_name IS NOT NULL) "
                   "AS tools FROM spans WHERE run_id = 'r-crash' GROUP BY trace_id ORDER BY min(start_ns)")
    assert len(attempts) == 2  # one trace per attempt, both under the same lousho.run.id
    first, second = attempts
    # The killed attempt never ended its root span; the steps it finished were exported as they ended.
    assert first["roots"] == 0 and first["tools"] == ["write_note", "write_note"]
    assert second["roots"] == 1 and second["tools"] == ["write_note", "write_note"]  # block (again) and d
    run = sql(daemon.url, "SELECT attempts, status, output FROM runs WHERE run_id = 'r-crash'")
    assert run == [{"attempts": 2, "status": "ok", "output": "saved 4 notes"}]


@pytest.mark.system
@pytest.mark.slow
def test_a_resume_without_observe_exports_to_the_daemon_the_run_was_started_with(tmp_path, model, daemon):
    """The run stores its observe URL as it stores its model URL, so `lousho runs` sees the resumed attempt
    finish: without it the daemon holds only the killed attempt (no root span ended, no output)."""
    agent_dir = copy_example(tmp_path / "agent", tools=BLOCKING_TOOLS)
    (agent_dir / "block.flag").touch()
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    model_flags = ["--model-url", model.url, "--model", "scripted", "--store", store]
    child = subprocess.Popen(
        [sys.executable, "-m", "lousho", "agent", "run", str(agent_dir), "note: a, block",
         "--run-id", "r-away", *model_flags, "--observe", daemon.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    effects = agent_dir / "workspace" / "effects.txt"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "block" not in (effects.read_text() if effects.exists() else ""):
        time.sleep(0.05)
    assert "block" in effects.read_text(), "the run never reached the blocking tool"
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)
    before = json.loads(lousho("runs", "--url", daemon.url, "--json").stdout)
    assert [(r["run_id"], r["attempts"]) for r in before] == [("r-away", 1)]  # the killed attempt only

    (agent_dir / "block.flag").unlink()
    resumed = lousho("runs", "resume", "r-away", *model_flags, "--json")  # no --observe, no LOUSHO_OBSERVE
    assert resumed.returncode == 0, resumed.stderr
    assert '"finish_reason": "stop"' in resumed.stdout

    listed = lousho("runs", "--url", daemon.url, "--json")
    assert listed.returncode == 0, listed.stderr
    after = json.loads(listed.stdout)
    assert [(r["run_id"], r["status"], r["attempts"]) for r in after] == [
        ("r-away", "ok", 2)]
