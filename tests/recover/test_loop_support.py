"""Helpers for the recover-loop tests (no tests here): a settable clock and an app whose outcomes are scripted.

The app is a real durable run on the real store, as an agent's would be: it opens the run with the loop's epoch,
replays the recorded steps, and then ends it the way the script says.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from lousho.kernel.errors import LoushoError
from lousho.models.errors import ProviderError
from lousho.recover import durable
from lousho.recover.store import RunStore, StoredRun

# Outcomes of one resume, as a run can end.
SUCCESS = "success"  # finished
PROVIDER = "provider"  # a 503: retryable, counts towards an outage
AUTH = "auth"  # a 401: not retryable, not an outage
BAD_REQUEST = "bad_request"  # a 400: not retryable
ERROR = "error"  # the run's own retryable error (a tool's connection failed)
PROGRESS = "progress"  # one more step saved, then a retryable error
BEFORE = "before"  # the app fails before it opens the run
APPROVAL = "approval"  # the run pauses for a person
STOP = "stop"  # the progress guard stops it (LOUSHO_RUN_NO_PROGRESS)
OUTCOMES = (SUCCESS, PROVIDER, AUTH, BAD_REQUEST, ERROR, PROGRESS, BEFORE, APPROVAL, STOP)
FAILURES = (PROVIDER, ERROR, PROGRESS, BEFORE)  # outcomes that leave the run to be tried again


class FakeClock:
    """The loop's clock; it moves only when a test moves it. Starts at the real now, so that the store's own
    timestamps (``created_at``, ``updated_at``: real time) are never in its future."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass(frozen=True)
class Call:
    run_id: str
    epoch: int
    outcome: str
    at: datetime
    seen: StoredRun  # the run as the app found it, before opening it


def provider_error(outcome: str) -> ProviderError:
    if outcome == PROVIDER:
        return ProviderError("HTTP 503 from the model provider: overloaded", code="LOUSHO_PROVIDER_UNKNOWN", status=503)
    if outcome == AUTH:
        return ProviderError("HTTP 401 from the model provider: Incorrect API key provided.",
                             code="LOUSHO_PROVIDER_AUTH", status=401)
    return ProviderError("HTTP 400 from the model provider: Bad request.", code="LOUSHO_PROVIDER_BAD_REQUEST",
                         status=400)


class ScriptedApp:
    """``RecoverApp`` whose outcomes come from ``script`` (per run id) or else ``queue`` (in call order, cycled),
    else ``default``. Records every call."""

    def __init__(self, store: RunStore, clock: FakeClock, default: str = SUCCESS) -> None:
        self.store = store
        self.clock = clock
        self.default = default
        self.script: dict[str, list[str]] = {}
        self.queue: list[str] = []
        self._next = 0
        self.calls: list[Call] = []

    def plan(self, outcomes: Iterable[str]) -> None:
        self.queue = list(outcomes)
        self._next = 0

    def _outcome(self, run_id: str) -> str:
        if self.script.get(run_id):
            return self.script[run_id].pop(0)
        if self.queue:
            outcome = self.queue[self._next % len(self.queue)]
            self._next += 1
            return outcome
        return self.default

    def resume(self, run_id: str, epoch: int) -> None:
        outcome = self._outcome(run_id)
        seen = self.store.get_run(run_id)
        assert seen is not None
        self.calls.append(Call(run_id, epoch, outcome, self.clock(), seen))
        if outcome == BEFORE:
            raise RuntimeError("could not build the agent")
        with durable.resume(self.store, run_id, epoch=epoch) as run:
            for index, record in sorted(run.recorded.items()):  # replay: recorded steps return their outputs
                run.step(record.name, lambda index=index: index)
            if outcome == PROGRESS:
                step = run.next_step
                run.step(f"step-{step}", lambda: step)
                raise ConnectionError("the tool's server reset the connection")
            if outcome in (PROVIDER, AUTH, BAD_REQUEST):
                raise provider_error(outcome)
            if outcome == ERROR:
                raise ConnectionError("the tool's server reset the connection")
            if outcome == APPROVAL:
                run.await_approval(tool_call_id=f"call-{run.next_step}", tool_name="delete_branch", args={})
                return
            if outcome == STOP:
                run.stop(LoushoError("the same failing call, again", code="LOUSHO_RUN_NO_PROGRESS", retryable=False))
                return
            run.finish({"done": True})


def interrupted_run(store: RunStore, run_id: str, *, kind: str = "send", steps: int = 1, failures: int = 1,
                    error: BaseException | None = None) -> StoredRun:
    """A run that ran ``steps`` steps and then failed ``failures`` times in a row (retryably, by default)."""
    run = durable.start(store, run_id, "coder", kind, {"task": run_id})
    for step in range(steps):
        run.step(f"step-{step}", lambda step=step: step)
    run.fail(error or ConnectionError("the tool's server reset the connection"))
    for _ in range(failures - 1):
        store.record_failure(run_id, {"message": "again", "code": "LOUSHO_RUN_EXCEPTION", "retryable": True})
    record = store.get_run(run_id)
    assert record is not None
    return record
