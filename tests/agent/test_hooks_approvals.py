"""Hooks that deny, replace and rewrite tool calls; approvals that pause a run for a person."""

from __future__ import annotations

import json

import pytest
from agent_support import copy_example, lousho
from daemon_support import sql

from lousho.agent import Deny, Hook, Replace, Rewrite, load
from lousho.agent.loop import Agent
from lousho.models.client import ChatClient
from lousho.observe import instrument
from lousho.recover import store as run_store


def _agent(tmp_path, model, hooks=(), provider=None) -> Agent:
    directory = load(copy_example(tmp_path / "agent"))
    store = run_store.open(f"sqlite:///{tmp_path / 'runs.db'}")
    return Agent(directory, ChatClient(model.url, "scripted"), store, model_name="scripted", hooks=hooks,
                 tracer_provider=provider)


def _notes(agent: Agent) -> list[str]:
    path = agent.directory.path / "workspace" / "notes.txt"
    return [line.split("\t")[1] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.system
def test_a_deny_hook_keeps_the_tool_from_running_and_tells_the_model(tmp_path, model, daemon):
    provider = instrument("hooks", daemon.url, batch=False)
    deny_secret = Hook("no-secrets", pre_tool_call=lambda call: Deny("secrets stay out of notes")
                       if "secret" in call.arguments.get("text", "") else None)
    agent = _agent(tmp_path, model, hooks=[deny_secret], provider=provider)
    result = agent.send("note: hello, secret plan", run_id="deny-1")
    provider.shutdown()
    assert result.finish_reason == "stop"
    assert _notes(agent) == ["hello"]
    shown = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert shown[-1] == "denied by no-secrets: secrets stay out of notes"
    denied = sql(daemon.url, "SELECT events, status_code, error_type FROM spans WHERE run_id = 'deny-1' "
                 "AND operation = 'execute_tool' AND events IS NOT NULL")
    assert [(d["status_code"], d["error_type"]) for d in denied] == [("ERROR", "denied")]  # the span's error
    actions = [e["attributes"] for e in json.loads(denied[0]["events"]) if e["name"] == "heal.action"]
    assert actions == [{"heal.kind": "deny", "heal.hook": "no-secrets", "heal.tool": "write_note",
                        "heal.reason": "secrets stay out of notes"}]


@pytest.mark.system
def test_a_replacing_hook_skips_the_tool_and_its_span_says_so(tmp_path, model, daemon):
    provider = instrument("hooks", daemon.url, batch=False)
    cached = Hook("cache", pre_tool_call=lambda call: Replace(99.0) if call.tool == "add" else None)
    agent = _agent(tmp_path, model, hooks=[cached], provider=provider)
    for attempt in range(6):  # the scripted model sometimes answers from memory; find a run that called add
        result = agent.send("add 20 21", run_id=f"replace-{attempt}")
        if any(m["role"] == "tool" for m in model.requests[-1]["messages"]):
            break
    provider.shutdown()
    assert result.output == "The sum is 99."  # the hook's value: the add tool would have said 41
    tool_spans = sql(daemon.url, "SELECT attributes->>'lousho.tool.replaced_by_hook' AS hook FROM spans "
                     "WHERE run_id = ? AND operation = 'execute_tool'", [result.run_id])
    assert tool_spans == [{"hook": "cache"}]


@pytest.mark.system
def test_a_post_hook_replaces_the_result_the_model_sees(tmp_path, model):
    redact = Hook("redact", post_tool_call=lambda call, result: Replace("[redacted]"))
    agent = _agent(tmp_path, model, hooks=[redact])
    agent.send("note: x")
    assert _notes(agent) == ["x"]  # the tool ran
    shown = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert shown == ["[redacted]"]


@pytest.mark.system
def test_a_rewriting_hook_changes_the_tools_input(tmp_path, model):
    upper = Hook("upper", pre_tool_call=lambda call: Rewrite({"text": call.arguments["text"].upper()}))
    agent = _agent(tmp_path, model, hooks=[upper])
    agent.send("note: quiet, calm")
    assert _notes(agent) == ["QUIET", "CALM"]


@pytest.mark.system
def test_a_tool_needing_approval_pauses_the_run_until_a_person_approves(tmp_path, model):
    agent_dir = copy_example(tmp_path / "agent")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    common = ["--model-url", model.url, "--model", "scripted", "--store", store]
    assert lousho("agent", "run", str(agent_dir), "note: keep me", *common).returncode == 0
    paused = lousho("agent", "run", str(agent_dir), "clear notes", "--run-id", "r-clear", *common, "--json")
    result = json.loads(paused.stdout)
    assert result["finish_reason"] == "awaiting-approval"
    assert (agent_dir / "workspace" / "notes.txt").exists()  # nothing cleared yet
    pending = json.loads(lousho("runs", "pending", "--store", store, "--json").stdout)
    assert [(r["run_id"], r["status"]) for r in pending] == [("r-clear", "awaiting_approval")]
    # Resuming without a decision is refused: the run waits for a person.
    refused = lousho("runs", "resume", "r-clear", *common)
    assert refused.returncode == 1 and "LOUSHO_RUN_AWAITING_APPROVAL" in refused.stderr
    approved = lousho("runs", "approve", "r-clear", result["approval_id"], *common, "--json")
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["output"] == "done: deleted 1 notes"
    assert not (agent_dir / "workspace" / "notes.txt").exists()
    again = lousho("runs", "approve", "r-clear", result["approval_id"], *common)
    assert again.returncode == 1 and "LOUSHO_APPROVAL_NOT_FOUND" in again.stderr


@pytest.mark.system
def test_a_denied_approval_tells_the_model_and_the_tool_never_runs(tmp_path, model):
    agent_dir = copy_example(tmp_path / "agent")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    common = ["--model-url", model.url, "--model", "scripted", "--store", store]
    lousho("agent", "run", str(agent_dir), "note: keep me", *common)
    result = json.loads(lousho("agent", "run", str(agent_dir), "clear notes", "--run-id", "r-no", *common,
                               "--json").stdout)
    denied = lousho("runs", "approve", "r-no", result["approval_id"], "--deny", *common, "--json")
    assert json.loads(denied.stdout)["output"] == "done: denied by a person: clear_notes was not approved"
    assert (agent_dir / "workspace" / "notes.txt").read_text().count("keep me") == 1
