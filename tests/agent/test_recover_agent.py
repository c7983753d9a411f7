"""`lousho recover` with the reference agent: it finishes a run whose process was killed, and never
resumes a run the progress guard stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from agent_support import BLOCKING_TOOLS, copy_example, lousho
from daemon_support import sql
from test_progress_guard import FAILING_TOOLS, stubborn

from lousho.models.scripted import ScriptedModelServer
from lousho.recover import store as run_store


@pytest.mark.system
@pytest.mark.slow
def test_recover_loop_finishes_a_killed_agent_run_and_leaves_a_stopped_one_alone(tmp_path, model, daemon):
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent_dir = copy_example(tmp_path / "agent", tools=BLOCKING_TOOLS)
    (agent_dir / "block.flag").touch()
    child = subprocess.Popen(
        [sys.executable, "-m", "lousho", "agent", "run", str(agent_dir), "note: a, block, c", "--run-id", "killed",
         "--model-url", model.url, "--model", "scripted", "--store", store_url, "--lease-seconds", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    effects = agent_dir / "workspace" / "effects.txt"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "block" not in (effects.read_text() if effects.exists() else ""):
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    (agent_dir / "block.flag").unlink()

    stuck_dir = copy_example(tmp_path / "stuck", tools=FAILING_TOOLS)
    (stuck_dir / "agent.toml").write_text('name = "fetcher"\nmax_steps = 10\nprogress_guard = 3\n')
    with ScriptedModelServer(stubborn) as stubborn_model:
        stopped = lousho("agent", "run", str(stuck_dir), "get it", "--run-id", "stuck", "--model-url",
                         stubborn_model.url, "--model", "m", "--store", store_url)
    assert stopped.returncode == 0, stopped.stderr
    store = run_store.open(store_url)
    assert store.get_run("stuck").status == "stopped"
    stuck_attempts = store.get_run("stuck").attempts

    loop = subprocess.Popen(
        [sys.executable, "-m", "lousho", "recover", "--app", "lousho.agent.recoverable:AgentApp", "--store", store_url,
         "--interval", "0.5", "--lease-seconds", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "LOUSHO_OBSERVE": daemon.url})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and store.get_run("killed").status != "finished":
            time.sleep(0.2)
    finally:
        loop.send_signal(signal.SIGTERM)
        output, _ = loop.communicate(timeout=60)
    assert loop.returncode == 0, output
    killed = store.get_run("killed")
    assert killed.status == "finished", output
    assert killed.output["text"] == "saved 3 notes"
    assert "on_recovered" in output and "killed" in output
    done = Counter(line.split("\t")[2] for line in effects.read_text().splitlines() if line.startswith("done"))
    assert done == {"a": 1, "block": 1, "c": 1}

    after = store.get_run("stuck")
    assert after.status == "stopped" and after.attempts == stuck_attempts  # never resumed
    assert after.last_error["code"] == "LOUSHO_RUN_NO_PROGRESS"
    spans = sql(daemon.url, "SELECT count(*) AS n FROM spans WHERE run_id = 'killed'")
    assert spans[0]["n"] > 0  # the recovered attempt exported its spans to the daemon
