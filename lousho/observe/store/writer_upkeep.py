"""The loader's upkeep between loads: checkpoints (which let the spool delete what they made safe),
compaction, the local window, the looks for room while the disk is full, and the warning that it is behind.

A mixin of ``Writer`` (writer.py): these run on the loader's thread only, and share its state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lousho.observe.metrics import Metrics
from lousho.observe.store.span_store import SpanStore
from lousho.observe.store.spool import Spool
from lousho.observe.store.store_damage import is_disk_full

logger = logging.getLogger("lousho.observe.store.writer")

# Checkpoint when the queue is empty and this many request bytes were loaded since the last one.
CHECKPOINT_EVERY_BYTES = 32 * 1024 * 1024
# Checkpoint even under load once this much of the spool is loaded but not yet deleted: its segments can go
# only after a checkpoint, and the spool's bound counts them.
CHECKPOINT_SPOOL_FRACTION = 0.25
# Compact (remove a duplicate that got past the recent-key filter) when idle, at most this often: it scans
# the span keys, while a duplicate that old is rare.
COMPACT_EVERY_S = 10.0
# While the disk is full, look for room again this often (a statvfs; the store is reopened once room is back).
RECOVER_EVERY_S = 0.5
# A checkpoint owed to the spool (it holds loaded segments a checkpoint would free) that failed or was skipped
# is tried again this often while idle: with the spool at its bound nothing is admitted, so no load would
# come to retry it, and every request would be refused until a restart.
RELEASE_RETRY_S = 1.0

# Warn when the loader falls this far behind the acks, once until it catches up (to a tenth of it): past the
# default read-wait a query answers before it sees the spans acked before it, and the spool fills towards its
# 503s. The usual cause on a machine shared with CPU-bound work is the loader's lowered priority: beside three
# spinning processes on two cores, a loader at nice 10 loaded 10,000 spans/s in 11-14 loads in 45 s, 5-9 s behind,
# where one at nice 0 took 395-402 loads and stayed 0.01 s behind (benchmarks/perf/busy_machine.py).
BEHIND_WARN_S = 5.0  # the default read-wait (writer.READ_WAIT_S)


class LoaderUpkeep:
    """What the loader does besides loading; the Writer's state it reads is declared here."""

    _store: SpanStore
    _metrics: Metrics
    _spool: Spool
    _cond: threading.Condition
    _loaded_seq: int
    _released_seq: int
    _since_checkpoint: int
    _checkpoint_tried_at: float
    _compacted_at: float
    _committed_since_compaction: bool
    _window: tuple[float, Callable[[], int], float] | None
    _pruned_at: float
    _recover_at: float
    _nice: int
    _warned_behind: bool = False  # BEHIND_WARN_S: warned, and not caught up since
    lag_seconds: float

    def _checkpoint_owed(self) -> bool:
        """Whether loaded segments wait for a checkpoint that an idle loader should run now: the spool's room
        depends on it, or enough was loaded since the last one."""
        if self._loaded_seq <= self._released_seq:
            return False
        return (self._since_checkpoint >= CHECKPOINT_EVERY_BYTES
                or self._spool.bytes > CHECKPOINT_SPOOL_FRACTION * self._spool.capacity)

    def _release_wait(self) -> float | None:
        """While idle: seconds until the owed checkpoint is due (0: now), or None when none is owed."""
        if not self._checkpoint_owed():
            return None
        return max(0.0, self._checkpoint_tried_at + RELEASE_RETRY_S - time.monotonic())

    def _compact(self) -> None:
        """Remove duplicates that got past the recent-key filter while the loader is idle."""
        self._compacted_at = time.monotonic()
        self._committed_since_compaction = False
        try:
            removed = self._store.compact()
        except Exception as e:  # deliberate: the copies stay until the next try; the data is intact
            if is_disk_full(e):
                self._sync_disk_state()
                return
            logger.exception("idle compaction failed")
            return
        if removed:
            self._metrics.add(spans_accepted=-removed, spans_duplicate=removed)

    def keep_window(self, days: float, shipped: Callable[[], int], every_s: float) -> None:
        """In a fleet: traces older than ``days`` leave the store once ``shipped()`` (the lake's position) covers
        them, checked at most every ``every_s`` while idle (store/local_window.py)."""
        self._window = (days, shipped, every_s)
        self._pruned_at = time.monotonic()

    def _prune(self) -> None:
        if self._window is None:
            return
        days, shipped, every_s = self._window
        if time.monotonic() - self._pruned_at < every_s:
            return
        self._pruned_at = time.monotonic()
        try:
            removed = self._store.prune(time.time_ns() - int(days * 86_400e9), shipped())
        except Exception as e:  # deliberate: the old traces stay until the next try; nothing is lost
            if is_disk_full(e):
                self._sync_disk_state()
                return
            logger.exception("pruning the local window failed")
            return
        if removed:
            self._metrics.add(spans_pruned=removed)
            logger.info("the local window: %d spans older than %g days left the store (the lake keeps them)",
                        removed, days)

    def _checkpoint(self, wait: bool = False) -> None:
        """Fold the WAL into the database file, then let the spool delete what that made safe."""
        started = time.perf_counter()
        self._checkpoint_tried_at = time.monotonic()
        loaded = self._loaded_seq
        try:
            ran = self._store.checkpoint(wait=wait)
        except Exception as e:  # deliberate: a failed checkpoint loses nothing (the WAL keeps the data); retry later
            if is_disk_full(e):
                self._sync_disk_state()
                return
            logger.exception("checkpoint failed")
            return
        if not ran:
            return  # skipped (a fold held the database): the next idle moment tries again
        self._since_checkpoint = 0
        self._metrics.add(checkpoints=1, checkpoint_seconds_sum=time.perf_counter() - started)
        if loaded > self._released_seq:
            self._released_seq = loaded
            self._spool.release(loaded)

    def _recover(self) -> None:
        """While the disk is full: see whether the store has room again (then the queued records load)."""
        self._recover_at = time.monotonic() + RECOVER_EVERY_S
        if self._store.disk_full is not None:
            try:
                self._store.recover()
            except Exception:  # deliberate: the store stays refused (503) and the next look retries
                logger.exception("recovering the store from a full disk failed")
        if self._spool.disk_full is not None:
            self._spool.full()  # looks at the file system (at most every RECHECK_FULL_S)
        self._sync_disk_state()

    def _sync_disk_state(self) -> None:
        """Tell the metrics (and /healthz) whether the disk is full, logging each change once."""
        full = self._store.disk_full or self._spool.disk_full
        if not self._metrics.set_disk_full(full):
            return
        if full is not None:
            logger.error("%s: %s; refusing spans (503) until there is room: %s", full.code, full.message, full.hint)
        else:
            logger.warning("the store has room again: taking spans")

    def _warn_if_behind(self) -> None:
        lag = self.lag_seconds
        if lag >= BEHIND_WARN_S and not self._warned_behind:
            self._warned_behind = True
            hint = (f"; it runs {self._nice} nice steps below the request path, and on a machine busy with other "
                    "work --loader-nice 0 gives it an equal share" if self._nice > 0 else "")
            logger.warning("the loader is %.0f s behind the acks (queries wait up to their read-wait, then "
                           "answer with the lag; the spool fills towards refusals)%s", lag, hint)
        elif lag < BEHIND_WARN_S / 10:
            self._warned_behind = False
