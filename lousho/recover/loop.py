"""The recover loop (seed 000 "Recover a run now", DESIGN §5): finish interrupted runs without changing the agent.

Each tick claims the runs that are due, a batch at a time (``store.claim_due``: one compare-and-set per batch that
bumps each run's fencing epoch), decides what to do with it (``rules.decide``) and does it while holding the lease:
resume it through the app, quarantine it, fork it for a diagnosis retry, or leave it. Every decision is logged on
the ``lousho.recover`` logger (``extra={"lousho_recover": {...}}``: rule, run id, numbers) and returned in the
tick's ``TickReport``.

Invariants:

- a run is executed only by the holder of its lease, and every write of that execution is fenced by the epoch
  the claim returned, so any number of loops may share a store (recovery-anchors §9.1);
- a run is never tried before its ``next_attempt_at``, which a failure sets to ``backoff.next_attempt`` (the
  claim re-checks it, so a stale listing cannot break it: anchors §10, DBOS #742), and never before the
  provider's ``Retry-After`` stored with the error; nor is an outage probe;
- every lease the loop takes is released (with the run's next state in the same fenced write) unless the process
  dies or the lease was taken over, or the run finished (never claimed again: its lease fields then name the loop
  that finished it); a dead loop's leases lapse after ``lease_seconds``;
- while the outage breaker is open, the only run executed is the probe (one at a time across replicas: the slot
  is a store reservation), provider failures do not count towards a run's cap, and nothing is quarantined;
- a callback that raises is logged with its traceback and handed to ``on_error``; the loop carries on.

Callbacks run on the loop's thread, after the write they report has committed: a process that dies in between
loses the call (at most once; exactly once otherwise, because the transition itself is one fenced write).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from lousho.recover import backoff, outage
from lousho.recover.errors import CheckpointCorrupt, LeaseLost, RunExists, RunNotEnded, retry_after_of, stored_error
from lousho.recover.heal import can_heal, diagnosis_note, heal_id, is_heal_fork
from lousho.recover.lease import LEASE_SECONDS, ORPHAN_SECONDS, Clock, Keeper, default_owner, release, utc_clock
from lousho.recover.records import OutageState, StoredRun
from lousho.recover.rules import (
    FORK_FINISHED,
    HEAL,
    LEAVE,
    QUARANTINE,
    RESUME,
    WAIT_FOR_FORK,
    Decision,
    at_cap,
    decide,
)
from lousho.recover.store_protocol import RunStore

log = logging.getLogger("lousho.recover")


class RecoverApp(Protocol):
    """What the loop executes a run with; the reference agent implements it (so can any durable code).

    ``resume(run_id, epoch)`` is called on the loop's thread, one run at a time per loop, while the loop holds the
    run's lease at ``epoch`` and renews it. It must open the run with ``durable.resume(store, run_id,
    epoch=epoch)`` (with the epoch: without it the open is a takeover that fences out the very lease it runs
    under) and execute it to an ending: finish, fail (raise; ``DurableRun`` records the error), stop, or wait
    for approval. What it returns is ignored: the outcome is what the run recorded. If it raises before the run
    recorded anything, the loop records that error as the run's failure. ``LeaseLost`` out of it means another
    process took the run over; the loop leaves the run to it. The ``.heal`` fork's note is ``StoredRun.note``
    (``DurableRun.note``): the app should show it to the model.
    """

    def resume(self, run_id: str, epoch: int) -> object: ...


@dataclass(frozen=True)
class RecoverSettings:
    """The loop's numbers, with the seed's defaults (seed 000; recovery-anchors §8 "Ours")."""

    interval: float = 30.0  # seconds between ticks, and the backoff's base
    max_attempts: int = 10  # failures in a row that quarantine a run
    retry_with_diagnosis: bool = False
    lease_seconds: float = LEASE_SECONDS
    orphan_seconds: float = ORPHAN_SECONDS  # lease.py: when a running run with no lease counts as abandoned
    outage_after: int = outage.THRESHOLD
    batch: int = 1000  # ids per listing while probing
    claim_batch: int = 100  # most runs claimed at once (fewer when runs are slow: RecoveryLoop._claim_size)

    def __post_init__(self) -> None:
        for name in ("interval", "lease_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, not {getattr(self, name)!r}")
        for name in ("max_attempts", "outage_after", "batch", "claim_batch"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)!r}")
        if self.orphan_seconds < 0:
            raise ValueError(f"orphan_seconds must be >= 0, not {self.orphan_seconds!r}")


@dataclass(frozen=True)
class Decided:
    """One logged decision: the rule applied, the run (None for the breaker) and the numbers behind it."""

    rule: str
    run_id: str | None
    numbers: dict[str, Any]


@dataclass
class TickReport:
    decisions: list[Decided] = field(default_factory=list)
    attempted: list[str] = field(default_factory=list)  # runs handed to the app, in order
    paused: bool = False  # the breaker as this loop saw it at the end of the tick

    def rules(self, run_id: str | None = None) -> list[str]:
        return [d.rule for d in self.decisions if run_id is None or d.run_id == run_id]


class RecoveryLoop:
    """One replica of the recover loop. ``tick()`` does one pass; ``recover()`` runs ticks on a thread."""

    def __init__(
        self, store: RunStore, app: RecoverApp | Callable[[str, int], object],
        settings: RecoverSettings = RecoverSettings(), *,
        on_recovered: Callable[[str], object] | None = None,
        on_quarantined: Callable[[StoredRun], object] | None = None,
        on_outage: Callable[[bool], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
        clock: Clock = utc_clock, owner: str | None = None, rng: random.Random | None = None,
        stop_event: threading.Event | None = None,
    ) -> None:
        self.store = store
        self.resume: Callable[[str, int], object] = getattr(app, "resume", app)
        self.settings = settings
        self.clock = clock
        self.owner = owner or default_owner()
        self.stop_event = stop_event or threading.Event()
        self._rng = rng or random.Random()  # its own generator: the global one feeds OTel's span ids
        self._on_recovered = on_recovered
        self._on_quarantined = on_quarantined
        self._on_error = on_error
        self._watch = outage.OutageWatch(lambda paused: self._call("on_outage", on_outage, paused))
        self._keeper = Keeper(store, owner=self.owner, seconds=settings.lease_seconds, clock=clock)
        self._report = TickReport()
        self._pace: float | None = None  # seconds a claimed run took to handle, smoothed (_claim_size)

    # --- one tick ---

    def tick(self) -> TickReport:
        """List, claim and handle every due run once (or only probe, while the breaker is open)."""
        self._report = report = TickReport()
        state = self.store.get_outage()
        self._watch.observe(state)
        if state.paused:
            self._probe(state)
        if not self._watch.paused:
            self._pass()
        report.paused = self._watch.paused
        return report

    def _pass(self) -> None:
        seen: set[str] = set()
        while True:
            now, size = self.clock(), self._claim_size()
            claimed = self.store.claim_due(owner=self.owner, lease_seconds=self.settings.lease_seconds, now=now,
                                           orphan_before=self._orphan_before(now), limit=size)
            for index, run in enumerate(claimed):
                if isinstance(run, CheckpointCorrupt):
                    self._guarded(run.run_id, lambda _id, error=run: self._raise(error))
                    continue
                stop = ("stopping" if self.stop_event.is_set() else "outage-pause-pass" if self._watch.paused
                        else "seen" if run.id in seen else None)
                if stop is not None:  # the rest goes back now rather than when its leases lapse
                    self._hand_back(claimed[index:], stop)
                    return
                if self._aged(now):
                    # Runs slowed down after the batch was sized: the rest would start late in (or past) leases
                    # nobody renews while they wait, and another replica may already be taking them over. Give
                    # them back and claim afresh, with new leases, at the pace just seen.
                    self._hand_back(claimed[index:], "claim-aged")
                    break
                seen.add(run.id)
                started = time.monotonic()
                self._guarded(run.id, lambda _id, run=run: self._act(run))
                elapsed = time.monotonic() - started
                self._pace = elapsed if self._pace is None else 0.8 * self._pace + 0.2 * elapsed
            else:
                if len(claimed) < size:
                    return

    def _claim_size(self) -> int:
        """How many due runs to claim at once: as many as this loop expects to start within a third of a lease, by
        the pace of its recent runs, so that each claimed run is started well inside its lease and a replica that
        dies strands few; 1 until a run was timed, at most ``claim_batch``."""
        if self._pace is None:
            return 1
        fits = int(self.settings.lease_seconds / 3 / max(self._pace, 1e-6))
        return max(1, min(self.settings.claim_batch, fits))

    def _aged(self, claimed_at: datetime) -> bool:
        """Whether a batch claimed at ``claimed_at`` has held its leases for half of them: the next run of it would
        start with less than half its lease left."""
        return (self.clock() - claimed_at).total_seconds() > self.settings.lease_seconds / 2

    def _hand_back(self, runs: list[StoredRun | CheckpointCorrupt], why: str) -> None:
        """Release claimed runs this pass will not start (each a fenced write at the epoch it was claimed at)."""
        left = [run for run in runs if isinstance(run, StoredRun)]
        for run in left:
            release(self.store, run.id, run.lease_epoch)
        if why == "outage-pause-pass":  # the breaker opened during this pass: the rest waits for the probe
            self._log(why, None, left=len(left))

    @staticmethod
    def _raise(error: BaseException) -> None:
        raise error

    def _act(self, run: StoredRun) -> None:
        decision = self._decide(run)
        if decision.action == RESUME:
            self._attempt(run)
        else:
            self._apply(run, decision)

    def _probe(self, state: OutageState) -> None:
        """Half-open (seed: "tries one run at a time, at growing intervals"): take the store's probe slot, try
        one due run, and either close the breaker (it got through) or push the next probe further out."""
        now = self.clock()
        lease = timedelta(seconds=self.settings.lease_seconds)
        if not self.store.reserve_probe(owner=self.owner, now=now, expiry=now + lease):
            self._log("outage-wait", None, paused_since=state.paused_since, next_probe_at=state.next_probe_at,
                      probe_owner=state.probe_owner)
            return
        outcome = "none"
        try:
            for run_id in self.store.list_due(now=now, orphan_before=self._orphan_before(now),
                                              limit=self.settings.batch):
                run = self._claim(run_id)
                if run is None:
                    continue
                decision = self._decide(run)
                if decision.action != RESUME:  # quarantines and forks wait until the outage is over
                    release(self.store, run.id, run.lease_epoch)
                    self._log("outage-deferred", run.id, why=decision.rule)
                    continue
                self.store.renew_probe(owner=self.owner, expiry=self.clock() + lease, run_id=run.id)
                self._log("outage-probe", run.id, probes=state.probes)
                outcome = self._attempt(run, probe=True)
                break
        finally:
            if self._watch.paused:  # the probe did not close the breaker: free the slot for the next one
                failed = outcome == "provider-failure"
                now = self.clock()
                probes = self.store.get_outage().probes + failed
                next_at = None
                if failed:
                    next_at = backoff.not_before(backoff.next_probe(now, probes, self.settings.interval, self._rng),
                                                 now, retry_after_of(self.store.get_outage().last_error))
                self.store.release_probe(owner=self.owner, now=now, failed=failed, next_probe_at=next_at)
                self._log("outage-probe-failed" if failed else "outage-probe-idle", None, probes=probes,
                          next_probe_at=next_at)

    # --- one run, under its lease ---

    def _claim(self, run_id: str) -> StoredRun | None:
        now = self.clock()
        return self.store.claim_run(run_id, owner=self.owner, lease_seconds=self.settings.lease_seconds, now=now,
                                    orphan_before=self._orphan_before(now))

    def _decide(self, run: StoredRun) -> Decision:
        fork = None
        if at_cap(run, self.settings.max_attempts) and not is_heal_fork(run):
            fork = self.store.get_run(heal_id(run.id))
        heal = self.settings.retry_with_diagnosis and can_heal(run, self.store.history_limit)
        return decide(run, max_attempts=self.settings.max_attempts, heal=heal, fork=fork)

    def _apply(self, run: StoredRun, decision: Decision) -> None:
        """Every decision but RESUME, for a run this loop holds the lease of."""
        if self._watch.paused:  # nothing is quarantined or forked during an outage
            release(self.store, run.id, run.lease_epoch)
            self._log("outage-deferred", run.id, why=decision.rule)
        elif decision.action == QUARANTINE:
            self._quarantine(run, decision.rule)
        elif decision.action == HEAL:
            self._heal(run)
        elif decision.action == FORK_FINISHED:  # its fork finished before the original was deleted (a crash)
            self._healed(run.id, heal_id(run.id))
        elif decision.action in (WAIT_FOR_FORK, LEAVE):
            self._park(run, decision.rule)
        else:
            raise AssertionError(f"no handler for {decision}")

    def _attempt(self, run: StoredRun, probe: bool = False) -> str:
        """Hand the run to the app under a heartbeat, then settle what it recorded. Returns the outcome."""
        epoch = run.lease_epoch
        self._log("resume", run.id, attempt=run.attempts + 1, failures=run.consecutive_failures, epoch=epoch,
                  probe=probe)
        self._report.attempted.append(run.id)
        raised: Exception | None = None
        with self._keeper.keep(run.id, epoch, probe=probe):
            try:
                self.resume(run.id, epoch)
            except LeaseLost as e:
                self._log("lease-lost", run.id, epoch=epoch, current=e.current)
                return "lease-lost"
            except Exception as e:  # deliberate: the run's failure; what the run recorded decides what follows
                raised = e
            except BaseException:  # the process is stopping: let another replica have the run now
                release(self.store, run.id, epoch)
                raise
        return self._settle(run, raised)

    def _settle(self, run: StoredRun, raised: Exception | None) -> str:
        epoch = run.lease_epoch
        after = self.store.get_run(run.id)
        if after is None:
            self._log("gone", run.id)
            return "gone"
        if after.lease_epoch != epoch:
            self._log("lease-lost", run.id, epoch=epoch, current=after.lease_epoch)
            return "lease-lost"
        now = self.clock()
        if after.status in ("finished", "awaiting_approval", "stopped"):
            self._outcome(False, now, None)  # the provider answered
            if after.status == "finished":
                # No release: a finished run is never claimed again, so its lease fields are left saying who
                # finished it, and a resume costs one write less.
                self._finished(after)
            else:
                release(self.store, run.id, epoch)
                self._log(after.status.replace("_", "-"), run.id, code=(after.last_error or {}).get("code"))
                if after.status == "stopped":
                    self._fork_gave_up(after)
            return after.status
        if after.status == "running" or after.attempts == run.attempts:
            # The run recorded no ending (the app failed before opening it, or returned with it open): record
            # one, so that backoff and the cap bound this run like any other.
            exc = raised if raised is not None else RunNotEnded(run.id, after.status)
            error = stored_error(exc)
            after = self.store.record_failure(run.id, error, status="interrupted" if error["retryable"] else "failed",
                                              count_attempt=False, epoch=epoch)
        return self._failed(after, now)

    def _failed(self, run: StoredRun, now: datetime) -> str:
        epoch, error = run.lease_epoch, run.last_error or {}
        provider = outage.counts(error)
        state = self._outcome(provider, now, error)
        if provider and state.paused and run.consecutive_failures > 0:
            # Not counted during the pause (anchors §9.4: an outage must not quarantine healthy runs). Progress
            # reset the count to 0 before this failure added 1, so taking 1 off is right either way.
            run = self.store.update_run(run.id, epoch=epoch, consecutive_failures=run.consecutive_failures - 1)
            self._log("outage-not-counted", run.id, failures=run.consecutive_failures)
        decision = self._decide(run)
        outcome = "provider-failure" if provider else "failure"
        if decision.action == LEAVE:
            release(self.store, run.id, epoch)
            self._log("left-alone", run.id, why=decision.rule, code=error.get("code"),
                      category=error.get("category"))
            self._fork_gave_up(run)
            return "failed"
        if decision.action == RESUME or self._watch.paused:
            next_at = backoff.not_before(
                backoff.next_attempt(now, run.consecutive_failures, self.settings.interval, self._rng),
                now, retry_after_of(error))
            release(self.store, run.id, epoch, next_attempt_at=next_at)
            self._log("backoff", run.id, failures=run.consecutive_failures, max_attempts=self.settings.max_attempts,
                      delay_s=round((next_at - now).total_seconds(), 3), code=error.get("code"))
            return outcome
        self._apply(run, decision)
        return outcome

    def _outcome(self, provider_failure: bool, now: datetime, error: dict[str, Any] | None) -> OutageState:
        first_probe = backoff.not_before(backoff.next_probe(now, 0, self.settings.interval, self._rng), now,
                                         retry_after_of(error) if provider_failure else None)
        state, change = self.store.record_outcome(provider_failure=provider_failure, now=now,
                                                  threshold=self.settings.outage_after, first_probe_at=first_probe,
                                                  error=error if provider_failure else None)
        if change == "opened":
            self._log("outage-paused", None, failures=state.failures, threshold=self.settings.outage_after,
                      next_probe_at=state.next_probe_at, code=(error or {}).get("code"))
        elif change == "closed":
            self._log("outage-over", None)
        self._watch.observe(state)
        return state

    def _finished(self, run: StoredRun) -> None:
        if is_heal_fork(run):
            assert run.healed_from is not None
            self._healed(run.healed_from, run.id)
        else:
            self._log("recovered", run.id, attempts=run.attempts)
            self._call("on_recovered", self._on_recovered, run.id)

    def _healed(self, origin: str, fork: str) -> None:
        """The fork finished: the original goes (seed). ``delete_run``'s answer is the take-once, so of the paths
        that can get here (the fork's finisher, a later look at the original) exactly one reports it."""
        if self.store.delete_run(origin):
            self._log("healed", origin, fork=fork)
            self._call("on_recovered", self._on_recovered, origin)

    def _quarantine(self, run: StoredRun, rule: str) -> None:
        quarantined = self.store.update_run(run.id, epoch=run.lease_epoch, status="quarantined", lease_owner=None,
                                            lease_expiry=None, next_attempt_at=None)
        self._log("quarantine", run.id, why=rule, failures=run.consecutive_failures,
                  max_attempts=self.settings.max_attempts)
        self._call("on_quarantined", self._on_quarantined, quarantined)
        self._fork_gave_up(run)  # seed: "If the fork also reaches the cap, both are quarantined"

    def _fork_gave_up(self, run: StoredRun) -> None:
        """A ``.heal`` fork ended without finishing (quarantined, failed or stopped for good): the one more try is
        spent, so its original, waiting at the cap, is quarantined now rather than at its next look."""
        if is_heal_fork(run):
            assert run.healed_from is not None
            self._guarded(run.healed_from, self._quarantine_origin)

    def _quarantine_origin(self, origin_id: str) -> None:
        if self._watch.paused:
            return  # nothing is quarantined during an outage; the original's next look does it
        now = self.clock()
        origin = self.store.claim_run(origin_id, owner=self.owner, lease_seconds=self.settings.lease_seconds,
                                      now=now, orphan_before=self._orphan_before(now), due_only=False)
        if origin is None:
            return  # gone, or held: its holder sees the quarantined fork and quarantines it
        decision = self._decide(origin)
        if decision.action == QUARANTINE:
            self._quarantine(origin, decision.rule)
        else:  # a person resumed it meanwhile and it moved on: its own rules apply
            release(self.store, origin.id, origin.lease_epoch)
            self._log("origin-moved-on", origin.id, why=decision.rule)

    def _heal(self, run: StoredRun) -> None:
        steps = self.store.load_steps(run.id)
        from_step = max(steps) + 1 if steps else 0
        fork_id = heal_id(run.id)
        try:
            self.store.fork(run.id, from_step, fork_id, note=diagnosis_note(run, from_step))
            self._log("heal", run.id, fork=fork_id, from_step=from_step, failures=run.consecutive_failures)
        except RunExists:  # made since we looked (by a person): the deterministic id means it is the same fork
            self._log("heal-exists", run.id, fork=fork_id)
        self._park(run, "healing")
        fork = self._claim(fork_id)
        if fork is not None:  # the one more try, now
            self._attempt(fork)

    def _park(self, run: StoredRun, rule: str) -> None:
        """Release a run that waits on something other than time (its fork, a person): look again at the cap
        interval, so that a crash between two steps of a transition never strands it."""
        next_at = self.clock() + timedelta(seconds=backoff.CAP_SECONDS)
        release(self.store, run.id, run.lease_epoch, next_attempt_at=next_at)
        self._log(rule, run.id, next_attempt_at=next_at)

    # --- plumbing ---

    def _orphan_before(self, now: datetime) -> datetime:
        return now - timedelta(seconds=self.settings.orphan_seconds)

    def _guarded(self, run_id: str, fn: Callable[[str], object]) -> None:
        """Run ``fn(run_id)``; a store error or a bug is logged and reported, and the tick moves on (the run's
        lease, if taken, lapses and the run is tried again)."""
        try:
            fn(run_id)
        except LeaseLost as e:
            self._log("lease-lost", run_id, epoch=e.epoch, current=e.current)
        except Exception as e:  # deliberate: one run's trouble must not stop the others (logged, on_error)
            log.exception("recover: handling run %s failed", run_id)
            self._report_error(e)

    def _call(self, name: str, callback: Callable[..., object] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception as e:  # deliberate: seed 000 "A throwing callback doesn't stop the loop"
            log.exception("recover: callback %s raised", name)
            self._report_error(e)

    def _report_error(self, error: BaseException) -> None:
        if self._on_error is None:
            return
        try:
            self._on_error(error)
        except Exception:  # deliberate: on_error failing too is logged, and the loop still carries on
            log.exception("recover: on_error raised")

    def _log(self, rule: str, run_id: str | None, level: int = logging.INFO, **numbers: Any) -> None:
        self._report.decisions.append(Decided(rule, run_id, numbers))
        if log.isEnabledFor(level):
            detail = " ".join(f"{k}={v}" for k, v in numbers.items())
            log.log(level, "%s run=%s %s", rule, run_id or "-", detail,
                    extra={"lousho_recover": {"rule": rule, "run_id": run_id, "owner": self.owner, **numbers}})


class RecoverHandle:
    """The handle ``recover()`` returns: the loop, ticking on a daemon thread until ``stop()``."""

    def __init__(self, loop: RecoveryLoop) -> None:
        self.loop = loop
        self._thread = threading.Thread(target=self._run, name=f"lousho-recover:{loop.owner}", daemon=True)

    def start(self) -> RecoverHandle:
        self._thread.start()
        return self

    def _run(self) -> None:
        stop = self.loop.stop_event
        while not stop.is_set():
            try:
                self.loop.tick()
            except Exception as e:  # deliberate: a store outage fails a tick, not the loop (logged, on_error)
                log.exception("recover: tick failed")
                self.loop._report_error(e)
            stop.wait(self.loop.settings.interval)

    def run_once(self) -> TickReport:
        """One tick on the caller's thread (for tests, and for a cron-style caller)."""
        return self.loop.tick()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the loop to stop (it finishes the run in hand, then returns) and wait up to ``timeout``.
        True once the thread has ended."""
        self.loop.stop_event.set()
        return self.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


def recover(
    store: RunStore, app: RecoverApp | Callable[[str, int], object], *, interval: float = 30.0,
    max_attempts: int = 10, retry_with_diagnosis: bool = False, on_recovered: Callable[[str], object] | None = None,
    on_quarantined: Callable[[StoredRun], object] | None = None, on_outage: Callable[[bool], object] | None = None,
    on_error: Callable[[BaseException], object] | None = None, stop_event: threading.Event | None = None,
    clock: Clock = utc_clock, owner: str | None = None, lease_seconds: float = LEASE_SECONDS,
    orphan_seconds: float = ORPHAN_SECONDS, rng: random.Random | None = None,
) -> RecoverHandle:
    """Start the recover loop on a background thread; returns its handle (``stop()``, ``join()``).

    Every ``interval`` seconds it resumes each due interrupted run of ``store`` through ``app`` (see
    ``RecoverApp``), with the rules of seed 000: backoff doubling to 15 minutes, quarantine after
    ``max_attempts`` failures in a row (``on_quarantined(run)``), the ``.heal`` fork with
    ``retry_with_diagnosis``, non-retryable errors and runs awaiting a person left alone, and the outage pause
    (``on_outage(True/False)``). ``on_recovered(run_id)``
    reports each run it finished (for a ``.heal`` fork, the original's id). Setting ``stop_event`` stops it too.
    Run one per process; any number of processes may share the store.
    """
    settings = RecoverSettings(interval=interval, max_attempts=max_attempts,
                               retry_with_diagnosis=retry_with_diagnosis, lease_seconds=lease_seconds,
                               orphan_seconds=orphan_seconds)
    loop = RecoveryLoop(store, app, settings, on_recovered=on_recovered, on_quarantined=on_quarantined,
                        on_outage=on_outage, on_error=on_error, clock=clock, owner=owner, rng=rng,
                        stop_event=stop_event)
    return RecoverHandle(loop).start()
