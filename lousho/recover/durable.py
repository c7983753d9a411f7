"""Durable runs in the DBOS style: a run is code whose side effects go through ``run.step``.

On resume the code runs again from the top. ``run.step(name, fn)`` returns the recorded output of a completed
step without calling ``fn``, and runs and records the others. What this guarantees (recovery-anchors §1, §6):

- a *recorded* step never runs again, and its record is written once (the first record of an index stands);
- a step whose process died before its record committed runs again: side effects are at least once, so pass
  ``run.step_key()`` (or the tool call id) to anything that can deduplicate;
- the output and the done marker of a step commit together (one checkpoint row, one transaction);
- every write carries the lease epoch the run was opened with; once another opener moved it, every write of this
  handle raises ``LeaseLost`` (a ``BaseException``) and the run must stop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

from lousho.recover.errors import (
    STOPPED_CODE,
    LeaseLost,
    NestedStep,
    RunClosed,
    RunDiverged,
    stored_error,
)
from lousho.recover.records import Approval, StepRecord, StoredRun
from lousho.recover.store_protocol import RunStore

log = logging.getLogger(__name__)


class DurableRun:
    """A handle on one execution of a run. Not thread-safe: steps are numbered in call order.

    Invariants: step indexes count from 0 in call order, so the same code calls the same step at the same index
    on every execution (a different name at a recorded index is ``RunDiverged``); ``epoch`` never changes for a
    handle; after an ending (``finish``, ``fail``, ``stop``, ``await_approval``) the handle refuses further steps.
    """

    def __init__(self, store: RunStore, record: StoredRun, steps: dict[int, StepRecord]) -> None:
        self.store = store
        self.run_id = record.id
        self.agent = record.agent
        self.kind = record.kind
        self.input = record.input
        self.epoch = record.lease_epoch
        self.attempts = record.attempts
        self.healed_from = record.healed_from
        self.note = record.note
        self._steps = dict(steps)
        self._next = 0
        self._in_step: str | None = None
        self.ended: str | None = None  # the status this handle gave the run, once it ended it

    @property
    def next_step(self) -> int:
        """The index the next ``step`` call gets."""
        return self._next

    @property
    def recorded(self) -> dict[int, StepRecord]:
        """Steps recorded so far (loaded at open, plus those this handle saved)."""
        return dict(self._steps)

    def step_key(self, step: int | None = None) -> str:
        """An idempotency key for a step, the same on every execution of the run: by default the step whose
        ``fn`` is running (when called inside it), else the next one."""
        if step is None:
            step = self._next - 1 if self._in_step is not None else self._next
        return f"{self.run_id}:{step}"

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """The output of step ``name`` at the next index: recorded, or ``fn()`` run and recorded now.

        ``fn``'s value must be JSON (dict, list, str, finite number, bool, None). What this returns is that
        value after a JSON round trip, on the first execution as on a replay, so both see the same types
        (a tuple becomes a list on both); it is freshly decoded, not ``fn``'s object, and each index is
        returned once per handle, so the caller may mutate it. If ``fn`` raises, nothing is recorded and the
        error propagates.
        """
        self._check_open()
        if self._in_step is not None:
            raise NestedStep(self.run_id, self._in_step, name)
        index = self._next
        self._next += 1
        record = self._steps.get(index)
        if record is None:
            self._in_step = name
            try:
                value = fn()
            finally:
                self._in_step = None
            record = self.store.save_step(self.run_id, index, name, value, self.epoch)
            self._steps[index] = record
        if record.name != name:
            raise RunDiverged(self.run_id, index, record.name, name)
        return record.output

    # --- endings: each is one fenced write ---

    def finish(self, output: Any = None) -> None:
        """Status ``finished`` with ``output`` stored (JSON); resume refuses the run from now on."""
        self._check_open()
        self.store.update_run(self.run_id, epoch=self.epoch, status="finished", output=output,
                              consecutive_failures=0, next_attempt_at=None)
        self.ended = "finished"

    def fail(self, error: BaseException) -> None:
        """Record ``error`` as last_error (a failure in a row); status ``interrupted`` if it is retryable
        (the recover loop will try again), else ``failed`` (left alone). The attempt was counted at open.
        """
        self._check_open()
        stored = stored_error(error)
        status = "interrupted" if stored["retryable"] else "failed"
        self.store.record_failure(self.run_id, stored, status=status, count_attempt=False, epoch=self.epoch)
        self.ended = status

    def stop(self, reason: str | BaseException) -> None:
        """Status ``stopped``: final, resume refuses it. ``reason`` is stored as the run's last error."""
        self._check_open()
        if isinstance(reason, BaseException):
            stored = {**stored_error(reason), "retryable": False}
        else:
            stored = {"message": reason, "code": STOPPED_CODE, "category": None, "retryable": False}
        self.store.update_run(self.run_id, epoch=self.epoch, status="stopped", last_error=stored)
        self.ended = "stopped"

    def await_approval(
        self, *, tool_call_id: str | None, tool_name: str | None, args: Any, kind: str = "tool",
        approval_id: str | None = None,
    ) -> Approval:
        """Create a pending approval and pause the run (``awaiting_approval``) in one fenced transaction.

        ``resume`` refuses the run until the approval is resolved; then the run's code re-executes and finds
        the decision with ``store.get_approval``.
        """
        self._check_open()
        approval = self.store.create_approval(
            self.run_id, tool_call_id=tool_call_id, tool_name=tool_name, args=args, kind=kind,
            approval_id=approval_id, pause_epoch=self.epoch,
        )
        self.ended = "awaiting_approval"
        return approval

    def _check_open(self) -> None:
        if self.ended is not None:
            raise RunClosed(self.run_id, self.ended)

    # --- context manager ---

    def __enter__(self) -> DurableRun:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> bool:
        """Record an escaping error on the run, then let it propagate (never swallowed).

        An ``Exception`` is recorded as by ``fail`` (interrupted, or failed when not retryable). A
        ``BaseException`` (KeyboardInterrupt, SystemExit, LeaseLost) marks the run ``interrupted`` without
        counting a failure: the process stopped, the run did not fail. A fenced-out handle cannot write, so
        after ``LeaseLost`` the run is left to its new owner.
        """
        if exc is None or self.ended is not None:
            return False
        try:
            if isinstance(exc, Exception):
                self.fail(exc)
            else:
                self.store.update_run(self.run_id, epoch=self.epoch, status="interrupted",
                                      last_error=stored_error(exc))
                self.ended = "interrupted"
        except LeaseLost:
            pass  # deliberate: the new owner records the run's state; the original exception carries on
        except Exception as e:  # deliberate: the store failing too must not hide the run's own error
            log.warning("could not mark run %s interrupted", self.run_id, exc_info=e)
            exc.add_note(f"lousho: run {self.run_id} could not be marked interrupted: {e!r}")
        return False


def start(store: RunStore, run_id: str, agent: str, kind: str, input: Any) -> DurableRun:
    """Create run ``run_id`` (status running, attempt 1, epoch 0) and open it; ``RunExists`` if the id is taken."""
    record = store.create_run(run_id, agent=agent, kind=kind, input=input, status="running", attempts=1)
    return DurableRun(store, record, {})


def resume(store: RunStore, run_id: str, *, epoch: int | None = None) -> DurableRun:
    """Open a new execution of an unfinished run with its recorded steps (attempts + 1, status running).

    Without ``epoch`` this bumps the run's lease epoch, fencing out any older handle; a caller that already holds
    a lease passes its epoch, which must still be current. Refuses finished and stopped runs
    (``RunNotResumable``), runs waiting on a pending approval (``RunAwaitingApproval``) and unknown ids
    (``RunNotFound``). Quarantined and failed runs may be resumed: that is how a person retries them.
    """
    record = store.begin_attempt(run_id, epoch=epoch)
    return DurableRun(store, record, store.load_steps(run_id))


__all__ = ["DurableRun", "resume", "start"]
