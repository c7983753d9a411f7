"""Durable runs: replay of recorded steps, at-least-once for the rest, divergence, endings, the context manager."""

from __future__ import annotations

from pathlib import Path

import pytest

from lousho.kernel.errors import LoushoError
from lousho.recover import durable
from lousho.recover.errors import (
    LeaseLost,
    NestedStep,
    RunClosed,
    RunDiverged,
    RunNotFound,
    RunNotResumable,
)
from lousho.recover.store import RunStore


class Ledger:
    """Side effects counted in a file, outside the store (what the run cannot fake)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def effect(self, name: str, value: object = None, fail: bool = False):
        def fn():
            with self.path.open("a") as f:
                f.write(name + "\n")
            if fail:
                raise ConnectionError(f"{name} failed")
            return value

        return fn

    def count(self, name: str) -> int:
        return self.path.read_text().splitlines().count(name) if self.path.exists() else 0


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.txt")


def _agent(run: durable.DurableRun, ledger: Ledger, fail_at: str | None = None) -> list[object]:
    """The run's code: three tool calls in a row; re-executed from the top on every resume."""
    return [run.step(name, ledger.effect(name, {"tool": name}, fail=name == fail_at))
            for name in ("search", "read", "write")]


def test_completed_steps_never_rerun_on_resume(store: RunStore, ledger: Ledger):
    with pytest.raises(ConnectionError), durable.start(store, "r1", "coder", "send", {"q": 1}) as run:
        _agent(run, ledger, fail_at="write")
    with durable.resume(store, "r1") as run:
        outputs = _agent(run, ledger)
        run.finish(outputs)
    assert [ledger.count(n) for n in ("search", "read", "write")] == [1, 1, 2]
    assert store.get_run("r1").output == [{"tool": "search"}, {"tool": "read"}, {"tool": "write"}]


def test_a_step_that_raised_is_rerun_on_resume_and_then_recorded(store: RunStore, ledger: Ledger):
    with pytest.raises(ConnectionError), durable.start(store, "r1", "coder", "send", {}) as run:
        _agent(run, ledger, fail_at="read")
    assert sorted(store.load_steps("r1")) == [0]
    for _ in range(2):  # a second resume replays everything: nothing runs again
        with durable.resume(store, "r1") as run:
            _agent(run, ledger)
    assert [ledger.count(n) for n in ("search", "read", "write")] == [1, 2, 1]


def test_a_heal_fork_replays_the_copied_steps_and_reruns_from_the_failing_one(store: RunStore, ledger: Ledger):
    with pytest.raises(ConnectionError), durable.start(store, "r1", "coder", "send", {"q": 1}) as run:
        _agent(run, ledger, fail_at="write")
    fork = store.fork("r1", len(store.load_steps("r1")), "r1.heal", note="write failed: ConnectionError")
    with durable.resume(store, fork.id) as healed:
        assert (healed.input, healed.healed_from, healed.note) == ({"q": 1}, "r1", fork.note)
        healed.finish(_agent(healed, ledger))
    assert [ledger.count(n) for n in ("search", "read", "write")] == [1, 1, 2]
    assert store.get_run("r1").status == "interrupted" and store.get_run("r1.heal").status == "finished"


def test_resume_increments_attempts_loads_the_steps_and_fences_out_the_previous_handle(store: RunStore):
    first = durable.start(store, "r1", "coder", "send", {"q": 1})
    assert (first.attempts, first.epoch) == (1, 0)
    first.step("a", lambda: 1)
    second = durable.resume(store, "r1")
    assert (second.attempts, second.epoch, sorted(second.recorded), second.input) == (2, 1, [0], {"q": 1})
    with pytest.raises(LeaseLost):
        first.step("b", lambda: 2)
    with pytest.raises(LeaseLost):
        first.finish("stale")
    assert second.step("a", lambda: pytest.fail("ran again")) == 1
    second.finish("done")
    assert store.get_run("r1").output == "done"


def test_resume_with_a_held_epoch_keeps_it_and_refuses_a_stale_one(store: RunStore):
    durable.start(store, "r1", "coder", "send", {})
    epoch = store.bump_epoch("r1", expected=0)  # a lease taken by the caller (the next issue's takeover)
    run = durable.resume(store, "r1", epoch=epoch)
    assert run.epoch == 1 and store.get_run("r1").lease_epoch == 1
    with pytest.raises(LeaseLost):
        durable.resume(store, "r1", epoch=0)


def test_resume_refuses_finished_and_stopped_runs_but_not_failed_or_quarantined(store: RunStore):
    durable.start(store, "done", "a", "send", {}).finish(None)
    durable.start(store, "halt", "a", "send", {}).stop("no progress")
    for run_id, status in (("done", "finished"), ("halt", "stopped")):
        with pytest.raises(RunNotResumable) as info:
            durable.resume(store, run_id)
        assert info.value.code == "LOUSHO_RUN_NOT_RESUMABLE" and info.value.status == status
    durable.start(store, "bad", "a", "send", {}).fail(LoushoError("400", code="LOUSHO_PROVIDER_BAD", retryable=False))
    store.create_run("q", agent="a", kind="send", input={}, status="quarantined")
    assert durable.resume(store, "bad").attempts == 2
    assert durable.resume(store, "q").attempts == 1
    with pytest.raises(RunNotFound):
        durable.resume(store, "missing")


def test_a_different_step_name_at_a_recorded_index_is_divergence_naming_both(store: RunStore):
    run = durable.start(store, "r1", "coder", "send", {})
    run.step("search", lambda: 1)
    again = durable.resume(store, "r1")
    with pytest.raises(RunDiverged) as info:
        again.step("delete_everything", lambda: pytest.fail("must not run"))
    err = info.value
    assert (err.code, err.step, err.recorded, err.called) == ("LOUSHO_RUN_DIVERGED", 0, "search", "delete_everything")
    assert "search" in err.message and "delete_everything" in err.message and "r1" in err.hint


def test_step_output_is_the_json_round_trip_on_first_run_and_on_replay(store: RunStore):
    run = durable.start(store, "r1", "coder", "send", {})
    first = run.step("s", lambda: {"pair": (1, 2), "by_id": {3: "int key"}})
    replayed = durable.resume(store, "r1").step("s", lambda: None)
    assert first == replayed == {"pair": [1, 2], "by_id": {"3": "int key"}}


def test_step_key_is_the_same_on_every_execution(store: RunStore):
    run = durable.start(store, "r1", "coder", "send", {})
    keys = [run.step_key()]
    assert run.step("a", run.step_key) == "r1:0"  # inside fn: the key of the step that is running
    keys.append(run.step_key())
    again = durable.resume(store, "r1")
    assert [again.step_key(0), again.step_key(1)] == keys == ["r1:0", "r1:1"]


def test_a_step_called_inside_another_step_is_refused(store: RunStore):
    run = durable.start(store, "r1", "coder", "send", {})
    with pytest.raises(NestedStep):
        run.step("outer", lambda: run.step("inner", lambda: 1))
    assert store.load_steps("r1") == {}


def test_ended_handle_refuses_more_steps(store: RunStore):
    run = durable.start(store, "r1", "coder", "send", {})
    run.finish({"answer": 42})
    with pytest.raises(RunClosed):
        run.step("late", lambda: 1)
    with pytest.raises(RunClosed):
        run.finish(None)
    assert store.get_run("r1").status == "finished"


def test_fail_marks_retryable_errors_interrupted_and_others_failed(store: RunStore):
    durable.start(store, "r1", "a", "send", {}).fail(TimeoutError("model timed out"))
    run = store.get_run("r1")
    assert (run.status, run.consecutive_failures, run.attempts) == ("interrupted", 1, 1)
    assert run.last_error == {"message": "TimeoutError: model timed out", "code": "LOUSHO_RUN_EXCEPTION",
                              "category": None, "retryable": True}
    durable.start(store, "r2", "a", "send", {}).fail(
        LoushoError("context too long", code="LOUSHO_PROVIDER_CONTEXT_LENGTH", retryable=False))
    run = store.get_run("r2")
    assert run.status == "failed" and run.last_error["code"] == "LOUSHO_PROVIDER_CONTEXT_LENGTH"


def test_context_manager_records_an_escaping_error_and_never_swallows_it(store: RunStore):
    with pytest.raises(ConnectionError, match="socket closed"), durable.start(store, "r1", "a", "send", {}) as run:
        run.step("a", lambda: 1)
        raise ConnectionError("socket closed")
    stored = store.get_run("r1")
    assert stored.status == "interrupted" and stored.consecutive_failures == 1
    assert stored.last_error["message"] == "ConnectionError: socket closed"


def test_keyboard_interrupt_marks_the_run_interrupted_without_counting_a_failure_and_propagates(store: RunStore):
    with pytest.raises(KeyboardInterrupt), durable.start(store, "r1", "a", "send", {}):
        raise KeyboardInterrupt
    run = store.get_run("r1")
    assert (run.status, run.consecutive_failures) == ("interrupted", 0)
    assert run.last_error["code"] == "LOUSHO_RUN_INTERRUPTED"


def test_lease_lost_inside_the_context_propagates_and_leaves_the_run_to_its_new_owner(store: RunStore):
    old = durable.start(store, "r1", "a", "send", {})
    new = durable.resume(store, "r1")
    with pytest.raises(LeaseLost), old:
        old.step("a", lambda: 1)
    run = store.get_run("r1")
    assert (run.status, run.lease_epoch, run.last_error) == ("running", new.epoch, None)


def test_stop_is_final_and_records_the_reason_as_not_retryable(store: RunStore):
    run = durable.start(store, "r1", "a", "send", {})
    run.stop(LoushoError("same failing call 3 times", code="LOUSHO_RUN_NO_PROGRESS"))
    stored = store.get_run("r1")
    assert stored.status == "stopped"
    assert stored.last_error["code"] == "LOUSHO_RUN_NO_PROGRESS" and stored.last_error["retryable"] is False
