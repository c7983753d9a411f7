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
from lousho.recover.loop import RecoverSettings, RecoveryLoop


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


@pytest.mark.system
def test_a_turn_the_recover_loop_finished_is_committed_to_the_transcript_and_the_session_goes_on(tmp_path, model):
    """A turn interrupted (here by a 503) is finished by a recover loop, which knows nothing of sessions: the
    session takes the finished turn's messages instead of blocking for ever or losing them."""
    session = _session(tmp_path, model)
    session.send("note: one")
    model.inject(Fault.status(503))
    with pytest.raises(ProviderError):
        session.send("note: two")
    store = session.agent.store
    report = RecoveryLoop(store, session.agent.resume, RecoverSettings(interval=0.01)).tick()
    assert report.attempted == ["chat-1.turn-2"]
    assert store.get_run("chat-1.turn-2").status == "finished"

    third = session.send("add 2 2")
    assert third.run_id == "chat-1.turn-3"
    contents = [m.get("content") for m in session.transcript()]
    assert contents.count("saved 1 notes") == 2  # turns 1 and 2, each once
    assert "note: two" in contents and "add 2 2" in contents
    assert session.pending() is None
    session.agent.model.close()
    store.close()


@pytest.mark.system
def test_resuming_a_turn_the_recover_loop_finished_returns_its_result(tmp_path, model):
    session = _session(tmp_path, model)
    model.inject(Fault.status(503))
    with pytest.raises(ProviderError):
        session.send("note: two")
    RecoveryLoop(session.agent.store, session.agent.resume, RecoverSettings(interval=0.01)).tick()
    result = session.resume()
    assert (result.run_id, result.output, result.finish_reason) == ("chat-1.turn-1", "saved 1 notes", "stop")
    assert session.pending() is None
    assert [m.get("content") for m in session.transcript()][-1] == "saved 1 notes"
    session.agent.model.close()
    session.agent.store.close()
