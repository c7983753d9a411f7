"""A Hypothesis state machine over the recover loop's rules: runs, a fake clock, ticks, scripted outcomes.

Each tick hands due runs to an app whose outcomes Hypothesis draws (success, provider failure, non-retryable
errors, retryable errors, progress, a failure before the run opens, a pause for approval, a stop). A reference
model replays every call in order and predicts what the store and the callbacks must show; after every step the
invariants of seed 000 and recovery-anchors §9.10.3 are checked:

- backoff: no run is handed to the app before its next_attempt_at, and every failure sets it to
  ``interval x 2^failures`` (capped) plus at most 10%;
- cap: no run at ``max_attempts`` failures in a row is resumed; reaching it quarantines once (or forks once, with
  retry_with_diagnosis, for send runs), and progress resets the count;
- heal forks: a fork that finishes deletes its original and reports the original's id; a fork at the cap
  quarantines both;
- non-retryable runs and runs awaiting a person are never handed to the app;
- outage: 3 provider failures in a row pause the loop (``on_outage(True)``); while paused at most one run is
  tried per tick, only once the probe is due, provider failures do not count and nothing is quarantined; the
  first probe that gets through ends the pause (``on_outage(False)``);
- leases: every run the app sees is claimed by this loop at the epoch it got; after a tick no lease is held;
- liveness: a tick that never paused hands every due, eligible run to the app.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from test_loop_support import (
    APPROVAL,
    AUTH,
    BAD_REQUEST,
    OUTCOMES,
    PROGRESS,
    PROVIDER,
    STOP,
    SUCCESS,
    FakeClock,
    ScriptedApp,
    interrupted_run,
    provider_error,
)

from lousho.recover import backoff, durable
from lousho.recover._codec import parse_utc
from lousho.recover.loop import RecoverSettings, RecoveryLoop
from lousho.recover.store import open as open_store

INTERVAL = 10.0
MAX_ATTEMPTS = 3
THRESHOLD = 3
NON_RETRYABLE_STATUS = {AUTH: "failed", BAD_REQUEST: "failed", STOP: "stopped"}  # what each leaves the run as


@dataclass
class Model:
    """What the store should hold for one run."""

    id: str
    kind: str
    status: str  # interrupted, awaiting_approval, failed, stopped, finished, quarantined, deleted
    failures: int
    fork_of: str | None = None


class RecoverMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="lousho-loop-"))
        self.store = open_store(f"sqlite:///{self.dir / 'runs.db'}")
        self.clock = FakeClock()
        self.app = ScriptedApp(self.store, self.clock)
        self.runs: dict[str, Model] = {}
        self.failures_in_a_row = 0  # the breaker's count, as the model sees it
        self.paused = False
        self.recovered: list[str] = []
        self.quarantined: list[str] = []
        self.outages: list[bool] = []
        self.errors: list[BaseException] = []
        self.expected_recovered: list[str] = []
        self.expected_quarantined: list[str] = []
        self.expected_outages: list[bool] = []
        self.count = 0

    @initialize(heal=st.booleans(), seed=st.integers(0, 2**16))
    def start_loop(self, heal: bool, seed: int) -> None:
        self.heal = heal
        self.loop = RecoveryLoop(
            self.store, self.app,
            RecoverSettings(interval=INTERVAL, max_attempts=MAX_ATTEMPTS, retry_with_diagnosis=heal,
                            outage_after=THRESHOLD),
            clock=self.clock, rng=random.Random(seed), on_recovered=self.recovered.append,
            on_quarantined=lambda run: self.quarantined.append(run.id), on_outage=self.outages.append,
            on_error=self.errors.append,
        )

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _new_id(self) -> str:
        self.count += 1
        return f"r{self.count}"

    # --- runs appear ---

    @rule(kind=st.sampled_from(["send", "turn"]), steps=st.integers(0, 2), failures=st.integers(1, MAX_ATTEMPTS - 1),
          count=st.integers(1, 3))
    def add_interrupted_runs(self, kind: str, steps: int, failures: int, count: int) -> None:
        for _ in range(count):
            run_id = self._new_id()
            interrupted_run(self.store, run_id, kind=kind, steps=steps, failures=failures)
            self.runs[run_id] = Model(run_id, kind, "interrupted", failures)

    @rule()
    def add_run_awaiting_approval(self) -> None:
        run_id = self._new_id()
        run = durable.start(self.store, run_id, "coder", "send", {})
        run.await_approval(tool_call_id="call-1", tool_name="delete_branch", args={})
        self.runs[run_id] = Model(run_id, "send", "awaiting_approval", 0)

    @rule(outcome=st.sampled_from([AUTH, BAD_REQUEST]))
    def add_run_that_failed_for_good(self, outcome: str) -> None:
        run_id = self._new_id()
        interrupted_run(self.store, run_id, error=provider_error(outcome))
        self.runs[run_id] = Model(run_id, "send", "failed", 1)

    # --- time and ticks ---

    @rule(seconds=st.sampled_from([1.0, 9.0, 30.0, 60.0, 200.0, 1000.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # Half the ticks meet a provider that fails every call, so that outages (3 in a row) and probes come up; the
    # others draw any outcome, so that probes get through and runs reach their caps.
    @rule(outcomes=st.one_of(st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=6), st.just([PROVIDER])),
          wait=st.sampled_from([0.0, 15.0, 60.0, 300.0]))
    def tick(self, outcomes: list[str], wait: float) -> None:
        self.clock.advance(wait)  # time passes between most ticks, so backoffs and probes come due
        now = self.clock()
        before = {r.id: r for r in self.store.list_runs()}
        state = self.store.get_outage()
        assert state.paused == self.paused
        due = {run_id for run_id, m in self.runs.items() if self._eligible(m)
               and (before[run_id].next_attempt_at is None or parse_utc(before[run_id].next_attempt_at) <= now)}
        probe_due = state.next_probe_at is not None and parse_utc(state.next_probe_at) <= now
        self.app.calls.clear()
        self.app.plan(outcomes)
        report = self.loop.tick()

        ever_paused = self.paused
        tried: set[str] = set()
        probes = 0
        for call in self.app.calls:
            m = self.runs[call.run_id]
            assert call.run_id not in tried, f"{call.run_id} tried twice in one tick"
            tried.add(call.run_id)
            self._check_call(call, m, now)
            if self.paused:
                probes += 1
                assert probes == 1 and probe_due, "while paused only one due probe runs"
            self._apply(call.outcome, m, now)
            ever_paused = ever_paused or self.paused
        for rule_name in set(report.rules()) & {"outage-paused", "outage-probe", "outage-over", "heal", "healed",
                                                 "quarantine", "outage-not-counted", "outage-wait"}:
            event(rule_name)  # what the examples exercised: --hypothesis-show-statistics
        if not ever_paused:  # liveness: nothing due and eligible was skipped
            assert due <= tried, f"due but not tried: {sorted(due - tried)} ({report.rules()})"
        if self.paused and probe_due and not self.app.calls and due:
            raise AssertionError("the probe was due and a run was due, yet nothing was probed")
        self._compare()

    # --- the model ---

    def _eligible(self, m: Model) -> bool:
        return m.status == "interrupted" and m.failures < MAX_ATTEMPTS

    def _check_call(self, call, m: Model, now) -> None:
        seen = call.seen
        assert self._eligible(m), f"{m} was handed to the app"
        assert seen.next_attempt_at is None or parse_utc(seen.next_attempt_at) <= now, "resumed before its time"
        assert seen.lease_owner == self.loop.owner and seen.lease_epoch == call.epoch, "resumed without the lease"
        assert seen.last_error is None or seen.last_error["retryable"]

    def _apply(self, outcome: str, m: Model, now) -> None:
        """What one call's outcome does to the model, in call order (the loop's rules, restated)."""
        provider = outcome == PROVIDER
        if provider:
            self.failures_in_a_row += 1
            if not self.paused and self.failures_in_a_row >= THRESHOLD:
                self.paused = True
                self.expected_outages.append(True)
        else:
            self.failures_in_a_row = 0
            if self.paused:
                self.paused = False
                self.expected_outages.append(False)
        if outcome == SUCCESS:
            m.status, m.failures = "finished", 0
            if m.fork_of is not None:
                self.runs[m.fork_of].status = "deleted"
                self.expected_recovered.append(m.fork_of)
            else:
                self.expected_recovered.append(m.id)
            return
        if outcome == APPROVAL:
            m.status = "awaiting_approval"
            return
        if outcome in NON_RETRYABLE_STATUS:
            m.status = NON_RETRYABLE_STATUS[outcome]
            m.failures += outcome != STOP
            if m.fork_of is not None:  # the one more try ended for good: its original is quarantined
                self._quarantine_origin(m.fork_of)
            return
        if outcome == PROGRESS:
            m.failures = 1
        elif not (provider and self.paused):  # a provider failure while paused does not count
            m.failures += 1
        stored = self.store.get_run(m.id)  # as the tick left it (a run is tried at most once per tick)
        if stored is not None and stored.status == "interrupted" and m.failures < MAX_ATTEMPTS:
            wait = (parse_utc(stored.next_attempt_at) - now).total_seconds()
            base = backoff.base_delay(m.failures, INTERVAL)
            assert base <= wait <= base * (1 + backoff.JITTER) + 1e-6, (m, wait, base)
        if m.failures >= MAX_ATTEMPTS:
            self._at_cap(m)

    def _at_cap(self, m: Model) -> None:
        if m.fork_of is not None:
            m.status = "quarantined"
            self.expected_quarantined.append(m.id)
            self._quarantine_origin(m.fork_of)
        elif self.heal and m.kind == "send" and f"{m.id}.heal" not in self.runs:
            self.runs[f"{m.id}.heal"] = Model(f"{m.id}.heal", "send", "interrupted", 0, fork_of=m.id)
        else:
            m.status = "quarantined"
            self.expected_quarantined.append(m.id)

    def _quarantine_origin(self, origin_id: str) -> None:
        origin = self.runs[origin_id]
        if origin.status == "interrupted":
            origin.status = "quarantined"
            self.expected_quarantined.append(origin.id)

    def _compare(self) -> None:
        stored = {r.id: r for r in self.store.list_runs()}
        for run_id, m in self.runs.items():
            if m.status == "deleted":
                assert run_id not in stored
                continue
            run = stored[run_id]
            assert (run.status, run.consecutive_failures) == (m.status, m.failures), (run, m)
            if run.status != "finished":  # a finished run keeps the name of the loop that finished it
                assert run.lease_owner is None and run.lease_expiry is None, f"{run_id} still leased after the tick"
        assert set(stored) == {i for i, m in self.runs.items() if m.status != "deleted"}
        outage = self.store.get_outage()
        assert (outage.paused, outage.failures) == (self.paused, self.failures_in_a_row)
        assert outage.probe_owner is None
        assert self.recovered == self.expected_recovered
        assert self.quarantined == self.expected_quarantined
        assert self.outages == self.expected_outages
        assert self.errors == []

    @invariant()
    def quarantine_is_reported_exactly_once(self) -> None:
        assert len(self.quarantined) == len(set(self.quarantined))
        assert {i for i, m in self.runs.items() if m.status == "quarantined"} == set(self.quarantined)

    @invariant()
    def runs_awaiting_a_person_and_failed_runs_are_untouched(self) -> None:
        for m in self.runs.values():
            if m.status in ("awaiting_approval", "failed", "stopped"):
                assert self.store.get_run(m.id).status == m.status


RecoverMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestRecoverLoopRulesOverRandomHistories = pytest.mark.slow(RecoverMachine.TestCase)


def test_backoff_bounds_are_the_ones_the_machine_checks():
    """The machine's backoff check restates backoff.py; pin the numbers it relies on."""
    assert backoff.base_delay(1, INTERVAL) == 20 and backoff.base_delay(2, INTERVAL) == 40
    assert timedelta(seconds=backoff.CAP_SECONDS) == timedelta(minutes=15)
