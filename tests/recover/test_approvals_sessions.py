"""Approvals (take-once, and the durable pause they cause) and sessions (optimistic saves)."""

from __future__ import annotations

import dataclasses

import pytest

from lousho.recover import durable
from lousho.recover.errors import ApprovalExists, ApprovalNotFound, LeaseLost, RunAwaitingApproval, SessionConflict
from lousho.recover.store import RunStore, Session


def test_an_approval_resolves_exactly_once(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    approval = store.create_approval("r1", tool_call_id="call-1", tool_name="rm", args={"path": "/"})
    assert (approval.status, approval.kind, approval.args, approval.resolved_at) == ("pending", "tool",
                                                                                     {"path": "/"}, None)
    resolved = store.resolve_approval(approval.id, approved=False)
    assert resolved.status == "denied" and resolved.resolved_at is not None
    with pytest.raises(ApprovalNotFound) as info:
        store.resolve_approval(approval.id, approved=True)
    assert info.value.code == "LOUSHO_APPROVAL_NOT_FOUND" and approval.id in info.value.message
    assert store.get_approval(approval.id).status == "denied"
    with pytest.raises(ApprovalNotFound):
        store.resolve_approval("never-created", approved=True)


def test_approvals_are_listed_by_run_and_status_and_ids_are_unique(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    store.create_run("r2", agent="a", kind="send", input={})
    a = store.create_approval("r1", tool_call_id="c1", tool_name="t", args=None, approval_id="apr-1")
    store.create_approval("r2", tool_call_id=None, tool_name=None, args={"q": "why?"}, kind="question")
    store.resolve_approval(a.id, approved=True)
    assert [x.id for x in store.list_approvals(run_id="r1")] == ["apr-1"]
    assert [x.run_id for x in store.list_approvals(status="pending")] == ["r2"]
    with pytest.raises(ApprovalExists):
        store.create_approval("r1", tool_call_id="c2", tool_name="t", args=None, approval_id="apr-1")
    with pytest.raises(ValueError, match="kind"):
        store.create_approval("r1", tool_call_id="c3", tool_name="t", args=None, kind="vibe")


def test_await_approval_pauses_the_run_and_resume_waits_for_the_decision(store: RunStore):
    run = durable.start(store, "r1", "a", "send", {})
    run.step("plan", lambda: "delete the branch")
    approval = run.await_approval(tool_call_id="call-7", tool_name="git_push", args={"force": True})
    assert store.get_run("r1").status == "awaiting_approval"
    with pytest.raises(RunAwaitingApproval) as info:
        durable.resume(store, "r1")
    assert info.value.approval_ids == [approval.id] and approval.id in info.value.hint
    store.resolve_approval(approval.id, approved=True)
    again = durable.resume(store, "r1")
    assert again.step("plan", lambda: pytest.fail("ran again")) == "delete the branch"
    assert store.get_approval(approval.id).status == "approved"


def test_a_fenced_out_handle_cannot_pause_the_run(store: RunStore):
    old = durable.start(store, "r1", "a", "send", {})
    durable.resume(store, "r1")
    with pytest.raises(LeaseLost):
        old.await_approval(tool_call_id="c", tool_name="t", args={})
    assert store.list_approvals(run_id="r1") == [] and store.get_run("r1").status == "running"


def test_session_save_is_optimistic(store: RunStore):
    fresh = Session("s1", "coder", [{"role": "user", "content": "hi"}])
    saved = store.save_session(fresh)
    assert saved.version == 1 and store.get_session("s1") == saved
    with pytest.raises(SessionConflict):
        store.save_session(fresh)  # a second writer also thought it was new

    mine = store.get_session("s1")
    theirs = store.get_session("s1")
    store.save_session(dataclasses.replace(theirs, turns=1, pending_turn="s1.turn-1"))
    with pytest.raises(SessionConflict) as info:
        store.save_session(dataclasses.replace(mine, transcript=[]))
    assert info.value.code == "LOUSHO_SESSION_CONFLICT" and info.value.retryable
    current = store.get_session("s1")
    assert (current.version, current.turns, current.pending_turn, current.transcript) == (
        2, 1, "s1.turn-1", [{"role": "user", "content": "hi"}])
    assert store.get_session("unknown") is None
