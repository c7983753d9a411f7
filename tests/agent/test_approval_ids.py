"""An approval covers the one tool call a person saw, even when the provider reuses tool call ids.

Tool call ids are the provider's: several OpenAI-compatible servers number them per response ("call_1" in every
turn), and lousho itself names a call without an id ``call_<i>``. A second call that needs approval must not
find the first call's decision under the same id and run without a person seeing it."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import copy_example

from lousho.agent import load
from lousho.agent.loop import Agent
from lousho.models.client import ChatClient
from lousho.models.scripted import ScriptedModelServer
from lousho.recover import store as run_store

# Two turns, each one write_note call with the same id: first a harmless note, then one a person must see.
REUSED_IDS = '''
def respond(request):
    done = [m for m in request.messages if m.get("role") == "tool"]
    if len(done) == 0:
        return {"tool_calls": [{"id": "call_1", "name": "write_note", "arguments": {"text": "hello"}}]}
    if len(done) == 1:
        return {"tool_calls": [{"id": "call_1", "name": "write_note", "arguments": {"text": "wire the money"}}]}
    return "done: " + done[-1]["content"]
'''


def _notes(agent_dir: Path) -> list[str]:
    path = agent_dir / "workspace" / "notes.txt"
    return [line.split("\t")[1] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.system
def test_a_reused_tool_call_id_does_not_carry_an_approval_to_another_call(tmp_path: Path):
    agent_dir = copy_example(tmp_path / "agent")
    toml = agent_dir / "agent.toml"
    toml.write_text(toml.read_text().replace('approval = ["clear_notes"]', 'approval = ["write_note"]'))
    script = tmp_path / "model.py"
    script.write_text(REUSED_IDS)
    store = run_store.open(f"sqlite:///{tmp_path / 'runs.db'}")
    with ScriptedModelServer(script) as model:
        agent = Agent(load(agent_dir), ChatClient(model.url, "scripted"), store, model_name="scripted")
        first = agent.send("two notes", run_id="r1")
        assert first.finish_reason == "awaiting-approval"
        store.resolve_approval(first.approval_id, approved=True)

        second = agent.resume("r1")
        # The second call is another call: it waits for its own decision, and its note is not written.
        assert second.finish_reason == "awaiting-approval", second
        assert second.approval_id != first.approval_id
        assert _notes(agent_dir) == ["hello"]
        approval = store.get_approval(second.approval_id)
        assert approval is not None and approval.status == "pending"
        assert (approval.tool_name, approval.args) == ("write_note", {"text": "wire the money"})

        store.resolve_approval(second.approval_id, approved=False)
        third = agent.resume("r1")
        assert third.finish_reason == "stop"
        assert third.output == "done: denied by a person: write_note was not approved"
        assert _notes(agent_dir) == ["hello"]
    store.close()
