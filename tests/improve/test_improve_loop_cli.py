"""The loop's commands through the real CLI: --apply, status, rollback, reject; the editor rate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from improve_support import ADD_FIX, editor_script, make_agent

from lousho.improve.controls import RateLimited
from lousho.models.config import ModelConfig
from lousho.models.scripted import ScriptedModelServer


def lousho(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True, timeout=300)


def test_apply_status_rollback_through_the_cli(tmp_path: Path, agent_model: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    base = (agent / "instructions.md").read_bytes()
    with ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as editor:
        done = lousho("improve", str(agent), "--check", str(check), "--model-url", agent_model.url, "--model", "a",
                      "--editor-model-url", editor.url, "--editor-model", "e", "--apply", "--json")
    assert done.returncode == 0, done.stderr
    cycle = json.loads(done.stdout)
    assert cycle["outcome"] == "applied" and ADD_FIX in (agent / "instructions.md").read_text()
    status = json.loads(lousho("improve", "status", str(agent), "--json").stdout)
    assert status["state"]["watched"]["status"] == "monitoring" and status["audit"]["ok"]
    assert status["revision"] == cycle["revision"]
    rolled = lousho("improve", "rollback", str(agent))
    assert rolled.returncode == 0, rolled.stderr
    assert (agent / "instructions.md").read_bytes() == base
    status = json.loads(lousho("improve", "status", str(agent), "--json").stdout)
    assert status["state"]["cooldown_until"] and status["audit"]["ok"]
    assert lousho("improve", "audit", str(agent), "--verify").returncode == 0


def test_manual_queue_and_reject_through_the_cli(tmp_path: Path, agent_model: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    (agent / ".lousho").mkdir()
    (agent / ".lousho" / "improve.json").write_text('{"approval": "manual"}')
    base = (agent / "instructions.md").read_bytes()
    with ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as editor:
        done = lousho("improve", str(agent), "--check", str(check), "--model-url", agent_model.url, "--model", "a",
                      "--editor-model-url", editor.url, "--editor-model", "e", "--apply")
    assert done.returncode == 0, done.stderr
    assert "cycle: queued" in done.stdout and (agent / "instructions.md").read_bytes() == base
    proposal = json.loads(lousho("improve", "status", str(agent), "--json").stdout)["proposals"][0]["id"]
    assert lousho("improve", "reject", str(agent), proposal).returncode == 0
    again = lousho("improve", "approve", str(agent), proposal, "--check", str(check), "--model-url",
                   agent_model.url, "--model", "a")
    assert again.returncode == 1 and "rejected" in again.stdout
    assert (agent / "instructions.md").read_bytes() == base


def test_a_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    agent, check = make_agent(tmp_path)
    (agent / ".lousho").mkdir()
    (agent / ".lousho" / "improve.json").write_text('{"cycles_per_dya": 3}')
    done = lousho("improve", "status", str(agent))
    assert done.returncode == 2 and "LOUSHO_IMPROVE_CONFIG_INVALID" in done.stderr and "cycles_per_dya" in done.stderr


def test_editor_calls_in_a_watcher_are_rate_limited(agent_model: ModelConfig) -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    with ScriptedModelServer(lambda request: "ok") as server:
        limited = RateLimited(ModelConfig(server.url, "e").client({}), 3, clock=lambda: now[0], sleep=sleep)
        for _ in range(7):
            limited.complete([{"role": "user", "content": "hi"}])
            now[0] += 1.0
        assert len(server.requests) == 7
    # 3 calls at t=0,1,2; the 4th waits until t=60; the 7th until t=120: never more than 3 in 60 s.
    assert slept and abs(sum(slept) - (120 - 6)) < 1e-6


def test_watch_through_the_cli_runs_ticks_and_releases_its_lease(tmp_path: Path, agent_model: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    with ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as editor:
        done = lousho("improve", str(agent), "--check", str(check), "--model-url", agent_model.url, "--model", "a",
                      "--editor-model-url", editor.url, "--editor-model", "e", "--watch", "--interval", "0.2",
                      "--ticks", "3")
    assert done.returncode == 0, done.stderr
    ticks = done.stdout.splitlines()
    assert len(ticks) == 3 and ticks[0].startswith("tick: cycle: applied")
    assert all(t.startswith("tick: monitoring") for t in ticks[1:])
    assert not (agent / ".lousho" / "watcher.lease").exists(), "a watcher that stops gives its lease back"


@pytest.mark.system
@pytest.mark.parametrize("loop_flag", ["--apply", "--watch"])
@pytest.mark.parametrize("step_flag", [["--cache-dir", "cache"], ["--cached-probe"], ["--quoted-checks", "flag"]])
def test_the_loop_refuses_the_step_flags_it_sets_itself(tmp_path: Path, loop_flag: str, step_flag: list[str]) -> None:
    agent, check = make_agent(tmp_path)
    before = (agent / "instructions.md").read_bytes()
    done = lousho("improve", str(agent), "--check", str(check), *step_flag, loop_flag)
    assert done.returncode == 2, done.stderr
    assert f"error LOUSHO_IMPROVE_STEP_ONLY_OPTION: {step_flag[0]} cannot be used with {loop_flag}" in done.stderr
    assert "hint: " in done.stderr and "Traceback" not in done.stderr
    assert (agent / "instructions.md").read_bytes() == before and not (agent / ".lousho").exists()


@pytest.mark.slow
@pytest.mark.system
def test_apply_searches_with_the_steps_flags(tmp_path: Path, agent_model: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    with ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as editor:
        done = lousho("improve", str(agent), "--check", str(check), "--model-url", agent_model.url, "--model", "a",
                      "--editor-model-url", editor.url, "--editor-model", "e", "--proposers", "2", "--apply",
                      "--json")
    assert done.returncode == 0, done.stderr
    cycle = json.loads(done.stdout)
    assert cycle["outcome"] == "applied", cycle["reason"]
    editors = sorted(d["subject"] for d in cycle["step"]["decisions"] if d["kind"] == "editor")
    assert len(editors) == 4, editors  # two invariant and two domain editors, as --proposers 2 asks
