"""Run leases: who may execute a run now, for how long, and the heartbeat that keeps the claim alive.

A lease is three columns of the run (``lease_owner``, ``lease_expiry``, ``lease_epoch``). ``store.claim_run``
takes it with one compare-and-set that bumps the epoch; the epoch is the fencing token every checkpoint write
carries, so a holder that stalled past its expiry and lost the run to another process is refused on its next
write (``LeaseLost``, a BaseException: it stops the stale runner). Renewing and releasing are fenced
``update_run`` calls at the claimed epoch, so neither can touch a lease someone else took since (STYLE §9).

Timing (recovery-anchors §9.1): the heartbeat renews every third of the lease, so two renewals can fail in a row
before the lease lapses. A dead process's runs become claimable ``lease_seconds`` after its last renewal.

Runs started outside the recover loop (``lousho agent run``, a person's ``lousho runs resume``) are protected by
holding a lease the same way (``hold``). A ``running`` run with no lease owner at all (code that never takes one)
is claimable once its ``updated_at`` is ``orphan_seconds`` old: without a heartbeat, age is the only evidence that
its process died, and since steps do not refresh ``updated_at`` the grace must outlast the longest run, not one
step; 15 minutes by default (the backoff cap: no run waits longer than that anyway).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType

from lousho.recover.durable import DurableRun
from lousho.recover.errors import LeaseLost, RunNotFound
from lousho.recover.store_protocol import RunStore

log = logging.getLogger("lousho.recover")

LEASE_SECONDS = 60.0
ORPHAN_SECONDS = 15 * 60.0
Clock = Callable[[], datetime]


def utc_clock() -> datetime:
    return datetime.now(UTC)


def default_owner(role: str = "recover") -> str:
    """A lease owner unique to this process and call: ``role@host:pid:random``. Owners are for people reading
    ``lousho runs pending``; correctness rests on the epoch, not on the owner's name."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Renewer:
    """Who renews leases and how often: the owner's name, the lease's length and the beat (a third of the lease
    unless given), shared by a ``Keeper`` and each ``Heartbeat`` it beats."""

    store: RunStore
    owner: str
    seconds: float = LEASE_SECONDS
    clock: Clock = utc_clock
    every: float | None = None

    @property
    def period(self) -> float:
        return self.seconds / 3 if self.every is None else self.every


class Heartbeat:
    """Renews the lease on one run (and the outage probe slot, with ``probe``) until the block ends.

    Invariants: each renewal is fenced at ``epoch``, so it never extends a lease another process took; once a
    renewal is refused (``LeaseLost``) or the run is gone, ``lost`` is set and renewing stops. A store error
    (busy, unreachable) is logged and the next beat tries again: the lease lapses only if every beat of a whole
    lease period fails.
    """

    def __init__(self, renewer: Renewer, run_id: str, epoch: int, *, probe: bool = False) -> None:
        self.renewer = renewer
        self.run_id = run_id
        self.epoch = epoch
        self.probe = probe
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """One renewal (the thread calls this every ``renewer.period`` seconds); nothing once the lease is lost."""
        if self.lost.is_set():
            return
        renewer = self.renewer
        expiry = renewer.clock() + timedelta(seconds=renewer.seconds)
        try:
            renewer.store.update_run(self.run_id, epoch=self.epoch, lease_expiry=expiry)
        except (LeaseLost, RunNotFound) as e:
            log.warning("lease-lost run=%s epoch=%d owner=%s: %s", self.run_id, self.epoch, renewer.owner, e)
            self.lost.set()
            self._stop.set()
            return
        except Exception:  # deliberate: a failed beat is retried at the next one (see the class docstring)
            log.warning("lease renewal of run %s failed; retrying at the next beat", self.run_id, exc_info=True)
            return
        if self.probe and not renewer.store.renew_probe(owner=renewer.owner, expiry=expiry):
            log.warning("outage probe slot of %s lapsed while probing with run %s", renewer.owner, self.run_id)
            self.probe = False

    def _run(self) -> None:
        while not self._stop.wait(self.renewer.period):
            self.beat()

    def __enter__(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._run, name=f"lousho-lease:{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class Keeper:
    """The recover loop's heartbeat: one thread that renews whichever lease the loop is running a run under.

    A loop runs one run at a time, and a thread started and joined per run costs more than the run's claim
    (benchmarks/perf/recover.py), so one thread serves them all. Invariant: a renewal runs under the keeper's lock,
    and ``keep`` takes that lock to let go of a lease, so no renewal of a run lands after the loop released it.
    The thread ends after ``every`` seconds with nothing to keep, and starts again on the next ``keep``.
    """

    def __init__(self, store: RunStore, *, owner: str, seconds: float = LEASE_SECONDS, clock: Clock = utc_clock,
                 every: float | None = None) -> None:
        self.renewer = Renewer(store, owner, seconds, clock, every)
        self.every = self.renewer.period
        self._cond = threading.Condition()
        self._held: Heartbeat | None = None
        self._due = 0.0
        self._thread: threading.Thread | None = None

    @contextmanager
    def keep(self, run_id: str, epoch: int, *, probe: bool = False) -> Iterator[Heartbeat]:
        """Renew the lease on ``run_id`` at ``epoch`` (and the probe slot, with ``probe``) until the block ends."""
        held = Heartbeat(self.renewer, run_id, epoch, probe=probe)  # its beat() only: the keeper's thread calls it
        with self._cond:
            self._held, self._due = held, time.monotonic() + self.every
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"lousho-lease:{self.renewer.owner}",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield held
        finally:
            with self._cond:  # waits for a renewal in progress; none starts after this
                self._held = None

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._held is None:
                    if not self._cond.wait(self.every) and self._held is None:
                        self._thread = None  # idle: end; keep() starts another
                        return
                    continue
                wait = self._due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._held.beat()
                self._due = time.monotonic() + self.every


def release(store: RunStore, run_id: str, epoch: int, **fields: object) -> bool:
    """Give the lease up (and set ``fields`` in the same fenced write). False if it was lost already or the run
    is gone: then there is nothing of ours to release."""
    try:
        store.update_run(run_id, epoch=epoch, lease_owner=None, lease_expiry=None, **fields)
    except (LeaseLost, RunNotFound):
        return False
    return True


@contextmanager
def hold(
    store: RunStore, run: DurableRun, *, owner: str | None = None, seconds: float = LEASE_SECONDS,
    clock: Clock = utc_clock,
) -> Iterator[Heartbeat]:
    """Hold a lease on a run opened outside the recover loop while the block executes it.

    ``run`` comes from ``durable.start`` (epoch 0) or ``durable.resume`` without an epoch (a takeover, which
    clears any old lease); both leave it ``running`` with a fresh ``updated_at``, so no loop claims it in the
    moment before the lease is written. The lease is written at the run's epoch (fenced), renewed by a heartbeat,
    and released at the end; if the process dies, the run is claimable ``seconds`` after the last renewal.
    """
    owner = owner or default_owner("run")
    store.update_run(run.run_id, epoch=run.epoch, lease_owner=owner,
                     lease_expiry=clock() + timedelta(seconds=seconds))
    try:
        with Heartbeat(Renewer(store, owner, seconds, clock), run.run_id, run.epoch) as beat:
            yield beat
    finally:
        release(store, run.run_id, run.epoch)
