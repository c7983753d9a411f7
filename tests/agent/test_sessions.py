"""Session turns: the transcript persists, each turn is a durable run, a pending turn blocks the next."""

from __future__ import annotations

import pytest
from agent_support import copy_example

from lousho.agent import load
from lousho.agent.errors import RunPending
from lousho.agent.loop import Agent
from lousho.agent.session import Session
from lousho.models.client import ChatClient
from lousho.models.errors import ProviderError
from lousho.models.faults import Fault
from lousho.recover import store as run_store


def _session(tmp_path, model) -> Session:
    agent = Agent(load(copy_example(tmp_path / "agent")), ChatClient(model.url, "scripted", timeout=2),
                  run_store.open(f"sqlite:///{tmp_path / 'runs.db'}"))
    return Session(agent, "chat-1")


@pytest.mark.system
def test_each_turn_is_a_durable_run_and_the_transcript_carries_over(tmp_path, model):
    session = _session(tmp_path, model)
    first = session.send("note: apples")
    second = session.send("add 2 2")
    assert (first.run_id, second.run_id) == ("chat-1.turn-1", "chat-1.turn-2")
    assert session.agent.store.get_run("chat-1.turn-2").kind == "turn"
    # The second turn's model call saw the first turn's conversation.
    seen = [m.get("content") for m in model.requests[-1]["messages"]]
    assert "note: apples" in seen and "saved 1 notes" in seen
    transcript = session.transcript()
    assert [m["role"] for m in transcript][:1] == ["user"] and transcript[-1]["content"].startswith("The sum is")


@pytest.mark.system
def test_a_pending_turn_must_be_resumed_or_discarded_before_the_next(tmp_path, model):
    session = _session(tmp_path, model)
    session.send("note: one")
    model.inject(Fault.status(503))
    with pytest.raises(ProviderError) as failed:
        session.send("note: two")
    assert failed.value.category == "unknown" and failed.value.retryable
    assert session.pending().id == "chat-1.turn-2"
    with pytest.raises(RunPending) as refused:
        session.send("note: three")
    assert refused.value.code == "LOUSHO_SESSION_TURN_PENDING"
    assert session.resume().output == "saved 1 notes"
    assert session.pending() is None
    assert session.send("note: three").run_id == "chat-1.turn-3"

    model.inject(Fault.status(503))
    with pytest.raises(ProviderError):
        session.send("note: four")
    before = session.transcript()
    session.discard_pending()
    assert session.pending() is None and session.transcript() == before
    assert session.agent.store.get_run("chat-1.turn-4").status == "stopped"
    assert session.send("note: five").run_id == "chat-1.turn-5"
