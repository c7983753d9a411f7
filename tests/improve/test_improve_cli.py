"""``lousho improve DIR --check MODULE``: the card or JSON, exit 0 for either outcome, 1 when it cannot run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from agent_runs import emit_run
from improve_support import ADD_FIX, HELD_OUT, NOOP, editor_script, make_agent
from test_step import tree_hash

from lousho.models.config import ModelConfig
from lousho.models.scripted import ScriptedModelServer
from lousho.observe.client.export import instrument
from lousho.observe.client.process import DaemonProcess


def lousho(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True, timeout=300)


def test_the_cli_prints_a_proposal_as_json_and_writes_nothing(tmp_path: Path, agent_model: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    before = tree_hash(agent)
    with ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as editor:
        done = lousho("improve", str(agent), "--check", str(check), "--model-url", agent_model.url, "--model", "agent",
                      "--editor-model-url", editor.url, "--editor-model", "editor", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["outcome"] == "proposal" and ADD_FIX in data["diff"]
    assert {"outcome", "reason", "diff", "cost"} <= set(data)
    assert data["cost"]["requests"] > 0 and data["cost"]["agent_runs"] > 0
    assert tree_hash(agent) == before


def test_the_cli_card_for_keep_base_exits_0(tmp_path: Path, agent_model: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    with ScriptedModelServer(editor_script({"invariant": [NOOP]})) as editor:
        done = lousho("improve", str(agent), "--check", str(check), "--model-url", agent_model.url, "--model", "agent",
                      "--editor-model-url", editor.url, "--editor-model", "editor", "--proposers", "2", "--parallel",
                      "--cache-dir", str(tmp_path / "cache"), "--quoted-checks", "flag")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("lousho improve: KEEP BASE")
    assert "no proposal improved a training case" in done.stdout
    assert "<" not in done.stdout.replace("<<<", "")  # plain text: no HTML


def test_the_cli_exits_1_when_the_step_cannot_run(tmp_path: Path, agent_model: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    (agent / "instructions.md").write_text("")
    done = lousho("improve", str(agent), "--check", str(check), "--model-url", agent_model.url, "--model", "agent",
                  "--json")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert data["outcome"] == "keep-base" and data["error"]["code"] == "LOUSHO_AGENT_DIR_INVALID"


def test_the_cli_refuses_bad_options_as_usage_errors(tmp_path: Path) -> None:
    agent, check = make_agent(tmp_path)
    done = lousho("improve", str(agent), "--check", str(check), "--proposers", "5")
    assert done.returncode == 2 and "proposers" in done.stderr


@pytest.mark.system
def test_the_cli_names_agent_name_when_the_failures_are_under_another_agent(tmp_path: Path, daemon: DaemonProcess,
                                                                           agent_model: ModelConfig) -> None:
    # The agent's runs carry the framework's name, not agent.toml's ("ledger"): the step reads none of them.
    provider = instrument("graph", daemon.url, batch=True)
    for i in range(4):
        emit_run(provider, f"g-{i}", agent="langgraph-bot", revision="r1", case=f"c{i}", input_text=f"add {i} 2",
                 outcome="fail" if i % 2 else "error")
    provider.shutdown()
    only_held_out = make_agent(tmp_path / "a", cases=HELD_OUT)
    done = lousho("improve", str(only_held_out[0]), "--check", str(only_held_out[1]), "--model-url", agent_model.url,
                  "--model", "agent", "--observe", daemon.url, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "LOUSHO_IMPROVE_NO_CASES"
    assert "'ledger'" in error["message"] and "'langgraph-bot' (4 failed runs)" in error["message"]
    assert "--agent-name langgraph-bot" in error["message"]

    # With cases of its own the step runs, and says so in the card.
    agent, check = make_agent(tmp_path / "b", cases=[{"id": "notes", "input": "note: a, b"}])
    card = lousho("improve", str(agent), "--check", str(check), "--model-url", agent_model.url, "--model", "agent",
                  "--observe", daemon.url)
    assert card.returncode == 0, card.stderr
    assert "FLAG" in card.stdout and "--agent-name langgraph-bot" in card.stdout
