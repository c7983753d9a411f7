"""The RunStore contract, against every backend: runs, steps, fencing, history, fork, corruption."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from recover_support import raw_sql

from lousho.recover.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    LeaseLost,
    OutputNotJson,
    RunExists,
    RunNotFound,
)
from lousho.recover.store import RunStore

ERROR = {"message": "provider said 503", "code": "LOUSHO_PROVIDER_UNAVAILABLE", "category": "unknown",
         "retryable": True}


def _run_with_steps(store: RunStore, run_id: str, count: int) -> None:
    store.create_run(run_id, agent="coder", kind="send", input={"task": "fix"})
    for i in range(count):
        store.save_step(run_id, i, f"step-{i}", {"i": i}, epoch=0)


# --- runs ---


def test_create_run_refuses_an_existing_id_and_leaves_it_unchanged(store: RunStore):
    store.create_run("r1", agent="coder", kind="send", input={"a": 1})
    with pytest.raises(RunExists) as info:
        store.create_run("r1", agent="other", kind="turn", input={"b": 2})
    assert info.value.code == "LOUSHO_RUN_EXISTS" and "r1" in info.value.hint
    run = store.get_run("r1")
    assert (run.agent, run.kind, run.input, run.lease_epoch, run.status) == ("coder", "send", {"a": 1}, 0, "running")


def test_unknown_run_is_none_to_reads_and_run_not_found_to_writes(store: RunStore):
    assert store.get_run("nope") is None
    assert store.load_steps("nope") == {} and store.history("nope") == []
    for write in (
        lambda: store.update_run("nope", status="failed"),
        lambda: store.record_failure("nope", ERROR),
        lambda: store.save_step("nope", 0, "s", 1, epoch=0),
        lambda: store.bump_epoch("nope"),
        lambda: store.begin_attempt("nope"),
        lambda: store.fork("nope", 0, "new"),
    ):
        with pytest.raises(RunNotFound):
            write()
    assert store.delete_run("nope") is False


def test_list_runs_filters_by_status_and_agent_in_creation_order(store: RunStore):
    store.create_run("a1", agent="a", kind="send", input=1)
    store.create_run("b1", agent="b", kind="turn", input=2, status="interrupted")
    store.create_run("a2", agent="a", kind="send", input=3, status="finished")
    assert [r.id for r in store.list_runs()] == ["a1", "b1", "a2"]
    assert [r.id for r in store.list_runs(agent="a")] == ["a1", "a2"]
    assert [r.id for r in store.list_runs(statuses=["running", "interrupted"])] == ["a1", "b1"]
    assert [r.id for r in store.list_runs(statuses=["finished"], agent="b")] == []
    assert store.list_runs(statuses=[]) == []


def test_update_run_sets_allowed_fields_and_refuses_others(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    later = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    run = store.update_run("r1", status="quarantined", next_attempt_at=later, note="n", last_error=ERROR)
    assert (run.status, run.next_attempt_at, run.note, run.last_error) == (
        "quarantined", "2030-01-02T03:04:05.000000Z", "n", ERROR)
    with pytest.raises(TypeError, match="lease_epoch"):
        store.update_run("r1", lease_epoch=7)
    with pytest.raises(ValueError, match="status"):
        store.update_run("r1", status="exploded")
    with pytest.raises(ValueError, match="time zone"):
        store.update_run("r1", next_attempt_at=datetime(2030, 1, 1))  # naive: the point of the test


def test_record_failure_counts_attempts_and_failures_in_a_row_and_keeps_the_error(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    store.record_failure("r1", ERROR)
    soon = datetime.now(UTC) + timedelta(seconds=30)
    run = store.record_failure("r1", {**ERROR, "message": "again"}, status="interrupted", next_attempt_at=soon)
    assert (run.attempts, run.consecutive_failures, run.status) == (2, 2, "interrupted")
    assert run.last_error == {**ERROR, "message": "again"}
    assert run.next_attempt_at is not None
    run = store.record_failure("r1", ERROR, count_attempt=False)
    assert (run.attempts, run.consecutive_failures) == (2, 3)


def test_saving_a_step_resets_consecutive_failures(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    store.record_failure("r1", ERROR)
    store.record_failure("r1", ERROR)
    store.save_step("r1", 0, "s", "out", epoch=0)
    run = store.get_run("r1")
    assert (run.consecutive_failures, run.attempts, run.last_error) == (0, 2, ERROR)


def test_delete_run_removes_its_steps_history_and_approvals_and_is_idempotent(store: RunStore):
    _run_with_steps(store, "r1", 3)
    _run_with_steps(store, "r2", 1)
    store.create_approval("r1", tool_call_id="c", tool_name="t", args={})
    assert store.delete_run("r1") is True
    assert store.get_run("r1") is None and store.load_steps("r1") == {} and store.history("r1") == []
    assert store.list_approvals(run_id="r1") == []
    assert store.delete_run("r1") is False
    assert sorted(store.load_steps("r2")) == [0]


# --- steps and fencing ---


def test_save_step_round_trips_json_and_refuses_what_json_cannot_hold(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    record = store.save_step("r1", 0, "s", {"t": (1, 2), "k": None}, epoch=0)
    assert record.output == {"t": [1, 2], "k": None}
    for bad in (math.nan, {"x": math.inf}, {1, 2}, object()):
        with pytest.raises(OutputNotJson) as info:
            store.save_step("r1", 1, "s", bad, epoch=0)
        assert info.value.code == "LOUSHO_CHECKPOINT_NOT_JSON" and "r1" in info.value.message
    assert sorted(store.load_steps("r1")) == [0]


def test_save_step_is_idempotent_and_the_first_record_of_a_step_stands(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    first = store.save_step("r1", 0, "s", "first", epoch=0)
    again = store.save_step("r1", 0, "s", "second", epoch=0)
    assert again == first
    assert store.load_steps("r1")[0].output == "first"
    assert len(store.history("r1")) == 1


def test_writer_holding_an_old_epoch_gets_lease_lost_and_writes_nothing(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    store.save_step("r1", 0, "s", 0, epoch=0)
    assert store.bump_epoch("r1") == 1
    with pytest.raises(LeaseLost) as info:
        store.save_step("r1", 1, "s", 1, epoch=0)
    assert (info.value.code, info.value.epoch, info.value.current) == ("LOUSHO_LEASE_LOST", 0, 1)
    with pytest.raises(LeaseLost):
        store.update_run("r1", epoch=0, status="finished")
    with pytest.raises(LeaseLost):
        store.record_failure("r1", ERROR, epoch=0)
    run = store.get_run("r1")
    assert sorted(store.load_steps("r1")) == [0] and run.status == "running" and run.attempts == 0
    store.save_step("r1", 1, "s", 1, epoch=1)  # the current holder still writes


def test_lease_lost_is_not_caught_by_except_exception(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    store.bump_epoch("r1")

    def careless_agent_code() -> str:
        try:
            store.save_step("r1", 0, "s", 0, epoch=0)
        except Exception:
            return "swallowed"
        return "wrote"

    assert not issubclass(LeaseLost, Exception)
    with pytest.raises(LeaseLost):
        careless_agent_code()


def test_bump_epoch_is_a_compare_and_set(store: RunStore):
    store.create_run("r1", agent="a", kind="send", input={})
    assert store.bump_epoch("r1", expected=0) == 1
    with pytest.raises(LeaseLost) as info:
        store.bump_epoch("r1", expected=0)  # someone else moved it first
    assert info.value.current == 1
    assert store.bump_epoch("r1") == 2
    assert store.get_run("r1").lease_epoch == 2


# --- history ---


def test_history_keeps_the_newest_50_steps_newest_first(store: RunStore):
    _run_with_steps(store, "r1", 60)
    entries = store.history("r1")
    assert [e.step for e in entries] == list(range(59, 9, -1))
    assert entries[0].name == "step-59" and entries[0].output == {"i": 59} and entries[0].epoch == 0
    assert [e.step for e in store.history("r1", limit=3)] == [59, 58, 57]
    assert len(store.load_steps("r1")) == 60  # the ring trims history, never the checkpoints


def test_history_keeps_n_entries_when_configured(open_more: Callable[..., RunStore]):
    store = open_more(history_limit=5)
    _run_with_steps(store, "r1", 12)
    assert [e.step for e in store.history("r1")] == [11, 10, 9, 8, 7]


def test_history_limit_zero_disables_history_but_not_checkpoints(open_more: Callable[..., RunStore]):
    store = open_more(history_limit=0)
    _run_with_steps(store, "r1", 4)
    assert store.history("r1") == []
    assert sorted(store.load_steps("r1")) == [0, 1, 2, 3]


def test_changing_the_history_limit_keeps_the_newest_entries(open_more: Callable[..., RunStore]):
    small = open_more(history_limit=5)
    _run_with_steps(small, "r1", 12)
    large = open_more(history_limit=50)
    assert [e.step for e in large.history("r1")] == [11, 10, 9, 8, 7]
    for i in range(12, 15):
        large.save_step("r1", i, f"step-{i}", {"i": i}, epoch=0)
    assert [e.step for e in large.history("r1")] == [14, 13, 12, 11, 10, 9, 8, 7]
    small.save_step("r1", 15, "step-15", {"i": 15}, epoch=0)
    assert [e.step for e in small.history("r1")] == [15, 14, 13, 12, 11]


def test_history_limit_must_be_a_non_negative_integer(open_more: Callable[..., RunStore]):
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="history_limit"):
            open_more(history_limit=bad)


# --- fork ---


def test_fork_copies_the_steps_before_from_step_into_a_new_run_and_leaves_the_source_alone(store: RunStore):
    _run_with_steps(store, "r1", 5)
    store.record_failure("r1", ERROR)
    fork = store.fork("r1", 3, "r1.heal", note="the tool failed: 'boom'")
    assert (fork.id, fork.healed_from, fork.note, fork.input, fork.agent, fork.kind) == (
        "r1.heal", "r1", "the tool failed: 'boom'", {"task": "fix"}, "coder", "send")
    assert (fork.status, fork.attempts, fork.consecutive_failures, fork.lease_epoch, fork.last_error) == (
        "interrupted", 0, 0, 0, None)
    copied = store.load_steps("r1.heal")
    assert sorted(copied) == [0, 1, 2]
    assert [c.output for c in copied.values()] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert [e.step for e in store.history("r1.heal")] == [2, 1, 0]
    assert sorted(store.load_steps("r1")) == [0, 1, 2, 3, 4]
    assert store.get_run("r1").consecutive_failures == 1


def test_fork_from_the_next_step_copies_every_step(store: RunStore):
    _run_with_steps(store, "r1", 3)
    store.fork("r1", 3, "r1.heal")
    assert sorted(store.load_steps("r1.heal")) == [0, 1, 2]
    store.create_run("empty", agent="a", kind="send", input={})
    store.fork("empty", 0, "empty.heal")
    assert store.load_steps("empty.heal") == {}


def test_fork_refuses_an_existing_new_id(store: RunStore):
    _run_with_steps(store, "r1", 2)
    store.create_run("taken", agent="x", kind="turn", input="mine")
    with pytest.raises(RunExists):
        store.fork("r1", 1, "taken")
    assert store.get_run("taken").input == "mine" and store.load_steps("taken") == {}


def test_fork_refuses_an_unknown_step_listing_the_steps_kept(store: RunStore):
    _run_with_steps(store, "r1", 3)
    for step in (4, 7, -1):
        with pytest.raises(CheckpointNotFound) as info:
            store.fork("r1", step, "r1.heal")
        assert info.value.code == "LOUSHO_CHECKPOINT_NOT_FOUND"
        assert "steps kept: 0, 1, 2" in info.value.message and info.value.kept == [0, 1, 2]
    assert store.get_run("r1.heal") is None


# --- corruption ---


def test_corrupt_step_output_raises_checkpoint_corrupt_naming_the_run_step_and_file(store: RunStore, store_url: str):
    _run_with_steps(store, "r-corrupt", 2)
    raw_sql(store_url, "UPDATE checkpoints SET output = ? WHERE run_id = ? AND step = 1", ("{not json", "r-corrupt"))
    with pytest.raises(CheckpointCorrupt) as info:
        store.load_steps("r-corrupt")
    err = info.value
    assert err.code == "LOUSHO_CHECKPOINT_CORRUPT" and (err.run_id, err.step) == ("r-corrupt", 1)
    assert "r-corrupt" in err.message and "step 1" in err.message
    assert "r-corrupt" in err.hint and store.location in err.hint


def test_corrupt_run_input_raises_checkpoint_corrupt_not_a_json_error(store: RunStore, store_url: str):
    store.create_run("r1", agent="a", kind="send", input={})
    # \x01, not \x00: a Postgres text value cannot hold a NUL byte at all, so no store can meet one there.
    raw_sql(store_url, "UPDATE runs SET input = ? WHERE id = ?", ("\x01garbage", "r1"))
    with pytest.raises(CheckpointCorrupt, match="r1") as info:
        store.get_run("r1")
    assert info.value.column == "input" and info.value.step is None
    with pytest.raises(CheckpointCorrupt):
        store.list_runs()
