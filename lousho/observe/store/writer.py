"""The single writer: a bounded admission queue in front of DuckDB, with group commit.

Requests are decoded by their own threads, then queued with their size. One thread takes everything
queued, appends it as one Arrow batch, commits, and only then resolves each request's future: an
HTTP 200 or gRPC OK means the spans are committed (ack after commit). Bytes leave the queue's count
only after the commit, so a slow writer fills the queue and new requests are refused with a
retryable answer (OTLP: 429/503 with Retry-After, gRPC UNAVAILABLE) instead of buffering without
bound.

A full disk (store_damage.is_disk_full) is retryable too: requests get the store's StoreDiskFull at once
(503 with Retry-After, gRPC UNAVAILABLE), and while idle the writer asks the store every
``RECOVER_EVERY_S`` whether it has room again (``SpanStore.recover``), so it resumes without a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

import duckdb

from lousho.observe.decode.otlp_decode import Decoded
from lousho.observe.metrics import Metrics
from lousho.observe.store.span_store import AppendResult, ArrowBatch, SpanStore, arrow_batch
from lousho.observe.store.store_damage import is_corruption, is_disk_full

logger = logging.getLogger(__name__)

# Checkpoint when the queue is empty and this many request bytes were committed since the last one.
CHECKPOINT_EVERY_BYTES = 32 * 1024 * 1024
# Compact (remove a duplicate that got past the recent-key filter) when idle, at most this often: it scans
# the span keys, while a duplicate that old is rare.
COMPACT_EVERY_S = 10.0
# While the disk is full, look for room again this often (a statvfs; the store is reopened once room is back).
RECOVER_EVERY_S = 0.5


def is_transient(error: BaseException) -> bool:
    """Whether a failed commit may succeed when retried (I/O, locks), or is the data's fault.

    A damaged store is neither: DuckDB reports a failed checksum or a short read as an IOException
    or TransactionException too, and retrying those would only repeat them (``is_corruption``). A full
    disk is transient, even where DuckDB calls it fatal: space comes back."""
    if is_disk_full(error):
        return True
    if is_corruption(error):
        return False
    return isinstance(error, duckdb.IOException | duckdb.TransactionException | OSError)


class QueueFull(Exception):
    """The admission queue has no room: the client should retry after a pause."""


class ShuttingDown(Exception):
    """The daemon is draining and accepts nothing new."""


@dataclass
class _Item:
    batch: ArrowBatch
    nbytes: int
    future: Future[AppendResult]


class Writer:
    def __init__(
        self,
        store: SpanStore,
        metrics: Metrics,
        *,
        capacity_bytes: int,
        max_batch_spans: int = 65_536,
        commit_delay: float = 0.0,
        compact_every_s: float = COMPACT_EVERY_S,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._capacity = capacity_bytes
        self._max_batch_spans = max_batch_spans
        # A fault point for tests and demos of backpressure: a pause before each commit.
        self._commit_delay = commit_delay
        self._queue: deque[_Item] = deque()
        self._queued_bytes = 0
        # Bytes of request bodies being read or inflated (BodyLimit): not queued yet, but in memory.
        self._reserved_bytes = 0
        self._cond = threading.Condition()
        self._closing = False
        self._since_checkpoint = 0  # bytes committed since the last checkpoint
        self._compact_every_s = compact_every_s
        self._compacted_at = time.monotonic()
        self._committed_since_compaction = False
        self._recover_at = 0.0  # monotonic: when to look for room again while the disk is full
        metrics.queue_capacity_bytes = capacity_bytes
        metrics.add(spans_duplicate=store.compacted_at_open)  # copies a previous run left, removed at open
        self._thread = threading.Thread(target=self._run, name="lousho-writer", daemon=True)
        self._thread.start()

    def has_room(self, nbytes: int) -> bool:
        """A cheap check before decoding: would a request of this size be admitted now?"""
        with self._cond:
            return not self._closing and self._fits(nbytes)

    def submit(self, batch: Decoded | ArrowBatch, nbytes: int) -> Future[AppendResult]:
        """Queue a decoded request; the future resolves after its commit.

        Pass the ``ArrowBatch`` (``store.decode_for_store``) from the decoding thread: a Decoded is converted
        here, in the caller's thread. Raises QueueFull or ShuttingDown; nothing is queued then.
        """
        if not isinstance(batch, ArrowBatch):
            batch = arrow_batch(batch)
        future: Future[AppendResult] = Future()
        if batch.span_count == 0:
            future.set_result(AppendResult(inserted=0, duplicates=0))
            return future
        full = self._store.disk_full
        if full is not None:
            future.set_exception(full)  # refused before queueing: nothing waits for a commit that cannot be
            return future
        with self._cond:
            if self._closing:
                raise ShuttingDown("the daemon is shutting down")
            if not self._fits(nbytes):
                raise QueueFull(f"admission queue full ({self._queued_bytes} bytes waiting)")
            self._queue.append(_Item(batch, nbytes, future))
            self._queued_bytes += nbytes
            self._metrics.queue_bytes = self._queued_bytes
            self._cond.notify()
        return future

    def reserve(self, nbytes: int, held: int = 0) -> bool:
        """Count ``nbytes`` more of a body being read against the queue's byte budget.

        ``held``: what the caller has already reserved for the same body. A body is never refused
        while it is the only thing holding the budget (as ``_fits`` admits a lone request), so one
        upload larger than the budget still gets through. Returns False, reserving nothing, when the
        bytes do not fit: the caller answers 503 and releases ``held``.
        """
        with self._cond:
            in_use = self._queued_bytes + self._reserved_bytes
            if self._closing or (in_use - held > 0 and in_use + nbytes > self._capacity):
                return False
            self._reserved_bytes += nbytes
            return True

    def release(self, nbytes: int) -> None:
        """Give back bytes taken by ``reserve`` (the body was handed on, refused or dropped)."""
        with self._cond:
            self._reserved_bytes -= nbytes

    def _fits(self, nbytes: int) -> bool:
        # An empty queue admits any request (each is already capped by the body limit), so a
        # request larger than the queue is not refused forever.
        in_use = self._queued_bytes + self._reserved_bytes
        return in_use == 0 or in_use + nbytes <= self._capacity

    def close(self, timeout: float | None = None) -> None:
        """Refuse new requests, commit everything queued, stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)

    def _commit_one_by_one(self, items: list[_Item]) -> None:
        for item in items:
            started = time.perf_counter()
            try:
                result = self._store.append([item.batch])
            except Exception as e:  # deliberate: the waiter gets the error and answers the client
                logger.exception("commit of one request (%d spans) failed", item.batch.span_count)
                item.future.set_exception(e)
            else:
                self._metrics.observe_commit(time.perf_counter() - started)
                self._metrics.add(spans_accepted=result.inserted, spans_duplicate=result.duplicates)
                item.future.set_result(result)

    def _run(self) -> None:
        while True:
            items = self._take()
            if items is None:
                return
            if not items:
                if self._store.disk_full is not None:
                    self._recover()
                else:
                    self._compact()
                continue
            if self._commit_delay:
                time.sleep(self._commit_delay)
            started = time.perf_counter()
            try:
                result = self._store.append([item.batch for item in items])
            except Exception as e:
                if is_disk_full(e):
                    # No room for any of them: each request hears the same retryable error.
                    for item in items:
                        item.future.set_exception(e)
                    continue
                # One request the store cannot take must not fail the others it was grouped with:
                # commit each alone, so only the culprit hears the error.
                logger.warning("group commit of %d requests failed; committing one by one", len(items))
                self._commit_one_by_one(items)
            else:
                self._metrics.observe_commit(time.perf_counter() - started)
                self._metrics.add(spans_accepted=result.inserted, spans_duplicate=result.duplicates)
                for item in items:
                    item.future.set_result(result)
            finally:
                with self._cond:
                    self._queued_bytes -= sum(item.nbytes for item in items)
                    self._metrics.queue_bytes = self._queued_bytes
                    idle = not self._queue
                self._sync_disk_state()
            self._since_checkpoint += sum(item.nbytes for item in items)
            self._committed_since_compaction = True
            if idle and self._since_checkpoint >= CHECKPOINT_EVERY_BYTES:
                self._checkpoint()
            if idle and time.monotonic() - self._compacted_at >= self._compact_every_s:
                self._compact()

    def _take(self) -> list[_Item] | None:
        with self._cond:
            while not self._queue and not self._closing:
                if self._store.disk_full is not None:
                    left = self._recover_at - time.monotonic()
                    if left <= 0:
                        return []
                    self._cond.wait(left)
                elif self._committed_since_compaction:
                    # Idle with spans unchecked: wake in time to compact them, unless work arrives first.
                    left = self._compact_every_s - (time.monotonic() - self._compacted_at)
                    if left <= 0:
                        return []
                    self._cond.wait(left)
                else:
                    self._cond.wait()
            if not self._queue:
                return None
            taken: list[_Item] = []
            spans = 0
            while self._queue and (not taken or spans < self._max_batch_spans):
                item = self._queue.popleft()
                taken.append(item)
                spans += item.batch.span_count
            return taken

    def _compact(self) -> None:
        """Remove duplicates that got past the recent-key filter while nobody waits for an ack."""
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

    def _checkpoint(self) -> None:
        """Fold the WAL into the database file while nobody waits for an ack."""
        started = time.perf_counter()
        try:
            ran = self._store.checkpoint()
        except Exception as e:  # deliberate: a failed checkpoint loses nothing (the WAL keeps the data); retry later
            if is_disk_full(e):
                self._sync_disk_state()
                return
            logger.exception("idle checkpoint failed")
            return
        if not ran:
            return  # skipped (a fold held the database): the next idle moment tries again
        self._since_checkpoint = 0
        self._metrics.add(checkpoints=1, checkpoint_seconds_sum=time.perf_counter() - started)

    def _recover(self) -> None:
        """While the disk is full and nothing is queued: see whether the store has room again."""
        self._recover_at = time.monotonic() + RECOVER_EVERY_S
        try:
            self._store.recover()
        except Exception:  # deliberate: the store stays refused (503) and the next look retries
            logger.exception("recovering the store from a full disk failed")
        self._sync_disk_state()

    def _sync_disk_state(self) -> None:
        """Tell the metrics (and /healthz) whether the disk is full, logging each change once."""
        full = self._store.disk_full
        if not self._metrics.set_disk_full(full):
            return
        if full is not None:
            logger.error("%s: %s; refusing spans (503) until there is room: %s", full.code, full.message, full.hint)
        else:
            logger.warning("the store has room again: taking spans")
