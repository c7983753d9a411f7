"""The loader: the spool acks, one thread appends what it accepted to DuckDB behind it.

A request is checked by the request path (counts and errors: what its answer needs), then its body goes to the
spool (spool.py): once the body is synced there the request is acked (a 200 or gRPC OK means the spans survive
a crash), and handed to this loader, in sequence order. Its rows are decoded after the ack: by the loader, or
under load by a decode thread working ahead of it. One thread takes what is queued, in one transaction (up to
``max_batch_spans`` spans, once the spool has been quiet for ``load_interval_s`` or the oldest record waited
``LOAD_MAX_WAIT_S``; at once when a reader waits for its acks: ``wait_loaded``), appends it with the sequence
number it reached in the same transaction, so a restart replays every record past it exactly once. Bodies wait
in memory up to ``capacity_bytes``; past that a record is kept on disk only and read back from the spool (a
slow store never holds memory without bound, and never refuses a request the spool can take). The spool's
bound (``spool_bytes``) is the admission bound: past it requests get a retryable refusal (OTLP 503 with
Retry-After, gRPC UNAVAILABLE).

A full disk is retryable: a spool write that finds no room fails its group only (StoreDiskFull); a load that
finds none keeps its records queued, and while idle the loader asks the store every ``RECOVER_EVERY_S``
whether it has room again (``SpanStore.recover``), then loads them; requests are refused meanwhile.
Segments wholly loaded are deleted once a checkpoint has folded their rows into the database file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import duckdb

from lousho.kernel import cpu_priority
from lousho.observe.decode import otlp_json_native, otlp_native
from lousho.observe.decode.otlp_decode import BadPayload, Checked, Decoded
from lousho.observe.errors import StoreCorrupt, StoreDiskFull
from lousho.observe.metrics import Metrics
from lousho.observe.store import faults
from lousho.observe.store import writer_upkeep as upkeep
from lousho.observe.store.span_store import ArrowBatch, SpanStore, arrow_batch
from lousho.observe.store.spool import KIND_JSON, KIND_PROTOBUF, Record, Spool, default_capacity
from lousho.observe.store.store_damage import is_corruption, is_disk_full, is_out_of_memory
from lousho.observe.store.writer_upkeep import LoaderUpkeep

logger = logging.getLogger(__name__)

# The most spans one load takes. A load of at least a row group (span_store.ROW_GROUP_ROWS) goes straight to the
# database file, compressed, where a smaller one writes every row to the WAL and again at the checkpoint; and each
# commit has a cost of its own. So a loader behind takes large loads: with the fold running, 16,384-span loads cost
# 7.7 µs a span, 36,864-span loads 6.6 and 131,072-span loads 6.4, checkpoints included (benchmarks/perf/append.py
# --sizes 16384,36864,131072). An idle or lightly loaded loader's loads stay small (by time: LOAD_INTERVAL_S,
# LOAD_MAX_WAIT_S), so this bounds only a backlog's.
MAX_BATCH_SPANS = 131_072
# Bodies this large are decoded by the loader itself, one load at a time, rather than as soon as they are
# acked: a body of tiny spans decodes to 6-19x its size, so eager decoding of many would hold that much.
DECODE_LATE_BYTES = 1024 * 1024
# With this many spans queued for the loader (it is behind: the daemon is under load), the decode thread
# decodes the queued bodies ahead of it, while DuckDB inserts the load before (its insert releases the GIL).
# Below it the loader decodes at its own turn: a decode holds the GIL for milliseconds, and an idle daemon's
# acks would wait behind it.
DECODE_AHEAD_SPANS = 20_000
# How far ahead of the loader it decodes, in loads: the next, while DuckDB inserts this one. Decoded rows take
# 2-19x their body's bytes (the queue counts the body's), and a decode holds the GIL: two loads ahead (262,144
# spans) moved decoding into a burst and cut what was accepted from 187,000 to 140,000 spans/s for the same
# committed rate (benchmarks/perf/ingest.py).
DECODE_AHEAD_WINDOW_LOADS = 1
# The loader waits for the spool to be quiet this long (no new record) before a load, so an ack leaves before
# the load takes the GIL (an idle daemon's ack p50 went from 5.5 to 3.3 ms against loading every 100 ms), and a
# burst keeps the CPU for its acks and its agent until it ends; but never past LOAD_MAX_WAIT_S for the oldest.
# Under steady load the records that gather while a load runs make the next one large by themselves.
LOAD_INTERVAL_S = 0.01
LOAD_MAX_WAIT_S = 0.25
# After a load fails in a way no branch expected (MemoryError, a bug), the same requests are tried again after
# this pause, doubled at each failure in a row up to the max: never skipped, as they were acked.
LOADER_RETRY_S = 0.5
LOADER_RETRY_MAX_S = 8.0
# How long a query waits for the loader to reach the acks it was sent after (read your acks).
READ_WAIT_S = 5.0


def is_transient(error: BaseException) -> bool:
    """Whether a failed commit may succeed when retried (I/O, locks), or is the data's fault.

    A damaged store is neither: DuckDB reports a failed checksum or a short read as an IOException
    or TransactionException too, and retrying those would only repeat them (``is_corruption``). A full
    disk is transient, even where DuckDB calls it fatal: space comes back."""
    if is_disk_full(error) or is_out_of_memory(error):
        # Out of memory (DuckDB's or Python's, a fatal one included: the store opens the database again) passes as
        # the loads or the query before it finish and free theirs.
        return True
    if is_corruption(error):
        return False
    return isinstance(error, duckdb.IOException | duckdb.TransactionException | OSError)


class QueueFull(Exception):
    """The spool has no room: the client should retry after a pause."""


class ShuttingDown(Exception):
    """The daemon is draining and accepts nothing new."""


# What the loader finds for a record: its rows; the decode thread's future of them; the body, decoded by the
# loader (a large one); or None: on disk only, read back from the spool.
_Payload = ArrowBatch | Future | bytes | None


@dataclass
class _Item:
    record: Record
    batch: _Payload
    nbytes: int  # of memory this item holds against ``capacity_bytes``
    spans: int  # counted by the request path's check; for a record replayed from disk, estimated from its size


@dataclass(frozen=True)
class _Accepted:
    """What travels with a body through the spool to the loader: its payload and its span count."""

    payload: _Payload
    spans: int


class Writer(LoaderUpkeep):
    def __init__(
        self,
        store: SpanStore,
        metrics: Metrics,
        *,
        capacity_bytes: int,
        spool_dir: Path | None = None,
        spool_bytes: int | None = None,
        max_batch_spans: int = MAX_BATCH_SPANS,
        load_interval_s: float = LOAD_INTERVAL_S,
        commit_delay: float = 0.0,
        compact_every_s: float = upkeep.COMPACT_EVERY_S,
        nice: int = 0,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._capacity = capacity_bytes
        self._max_batch_spans = max_batch_spans
        self._load_interval_s = load_interval_s
        self._load_max_wait_s = max(LOAD_MAX_WAIT_S, load_interval_s)  # a longer interval (tests, demo) holds both
        # A fault point for tests and demos of a slow store: a pause before each load.
        self._commit_delay = commit_delay
        self._queue: deque[_Item] = deque()
        self._queued_bytes = 0
        self._queued_spans = 0
        # Bytes of request bodies being read or inflated (BodyLimit): not spooled yet, but in memory.
        self._reserved_bytes = 0
        self._cond = threading.Condition()
        self._closing = False
        self._readers_waiting = 0
        self._loading_since: int | None = None  # accepted_ns of the oldest record being loaded now
        self._since_checkpoint = 0  # bytes loaded since the last checkpoint
        self._checkpoint_tried_at = 0.0  # monotonic: the last checkpoint's start, failed or not
        self._compact_every_s = compact_every_s
        self._window: tuple[float, Callable[[], int], float] | None = None
        self._pruned_at = 0.0
        self._compacted_at = time.monotonic()
        self._committed_since_compaction = False
        self._recover_at = 0.0  # monotonic: when to look for room again while the disk is full
        self._decode_protobuf = otlp_native.protobuf_decoder()
        self._decode_json = otlp_json_native.json_decoder()
        # Under load, decodes acked bodies ahead of the loader (DECODE_AHEAD_SPANS).
        # The loader and its decode thread run ``nice`` below the request path: acks first (cpu_priority.py).
        self._nice = nice
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lousho-decode",
                                           initializer=cpu_priority.lower_this_thread, initargs=(nice,))
        directory = spool_dir if spool_dir is not None else spool_directory(store.path)
        self._loaded_seq = store.spool_position()
        self._spool = Spool(directory, capacity_bytes=spool_bytes or default_capacity(directory),
                            loaded_seq=self._loaded_seq, on_durable=self._durable, on_full=self._spool_full)
        self._released_seq = self._loaded_seq
        started = time.monotonic_ns()
        for record in self._spool.replay:  # accepted before a crash, never loaded: first in line
            item = _Item(_restamped(record, started), None, 0, _estimated_spans(record))
            self._queue.append(item)
            self._queued_spans += item.spans
        metrics.queue_capacity_bytes = capacity_bytes
        metrics.lag_now = lambda: self.lag_seconds
        metrics.spool_bytes_now = lambda: self._spool.bytes
        metrics.fold_now = store.fold_stats
        metrics.spool_capacity_bytes = self._spool.capacity
        metrics.add(spans_duplicate=store.compacted_at_open,  # copies a previous run left, removed at open
                    spool_replayed=len(self._spool.replay), spool_damaged_segments=self._spool.damaged_segments)
        if self._spool.replay:
            logger.warning("replaying %d accepted requests the store had not loaded before the last stop",
                           len(self._spool.replay))
        self._spool.replay = []
        self._thread = threading.Thread(target=self._run, name="lousho-loader", daemon=True)
        self._thread.start()

    # -- accepting -------------------------------------------------------------------------------------

    def has_room(self, nbytes: int) -> bool:
        """A cheap check before decoding: would a request of this size be taken now?"""
        with self._cond:
            # Bodies being read share the memory budget (``reserve``): past it, refused before decoding.
            if self._closing or (self._reserved_bytes and self._reserved_bytes + nbytes > self._capacity):
                return False
        # A full disk is not "no room" here: ``submit`` refuses the request with the disk's own (coded) error.
        return self._spool.has_room(nbytes)

    def submit(self, checked: Checked | Decoded | ArrowBatch, nbytes: int, body: bytes | None = None,
               kind: int = KIND_PROTOBUF) -> Future[Record | None]:
        """Spool a checked request's ``body``; the future resolves once it is durable (the ack).

        The request path only checks the body (``protobuf_checker``: counts and errors, no columns); its rows are
        decoded after the ack: by the loader, or under load by the decode thread ahead of it.
        A Decoded or ArrowBatch already made is used as it is. Raises QueueFull or ShuttingDown; nothing
        is spooled then. A full disk or a damaged store fail the future (StoreDiskFull, StoreCorrupt)."""
        future: Future[Record | None] = Future()
        if checked.span_count == 0:
            future.set_result(None)  # nothing to keep: no record
            return future
        if body is None:
            raise ValueError("submit needs the request body: the spool keeps it until the store has loaded it")
        refusal = self._store.damaged or self._store.disk_full or self._spool.full()
        if refusal is not None:
            future.set_exception(refusal)  # refused before spooling: nothing is acked that could not be kept
            return future
        with self._cond:
            if self._closing:
                raise ShuttingDown("the daemon is shutting down")
        if not self._spool.has_room(nbytes):
            raise QueueFull(f"the spool is full ({self._spool.bytes} of {self._spool.capacity} bytes)")
        payload: _Payload
        if isinstance(checked, Decoded):
            payload = arrow_batch(checked)
        elif isinstance(checked, ArrowBatch):
            payload = checked
        else:
            payload = body  # decoded after the ack: ahead of the loader under load, else by the loader
        accepted = _Accepted(payload, checked.span_count)
        return self._spool.append(body, kind, accepted)  # type: ignore[return-value]

    def _decodes_ahead(self, batch: _Payload, record: Record, position: int) -> bool:
        """Whether a body ``position`` spans behind the loader is decoded now: under load, within the window; one
        kept on disk only (spilled, or replayed) is read back for it, not left to the loader between its inserts."""
        return ((batch is None or isinstance(batch, bytes)) and record.length < DECODE_LATE_BYTES
                and DECODE_AHEAD_SPANS <= self._queued_spans
                and position < DECODE_AHEAD_WINDOW_LOADS * self._max_batch_spans)

    def _decode_window_locked(self) -> None:
        """After a take: the bodies that came within the window as the loader moved are decoded ahead now."""
        if self._queued_spans < DECODE_AHEAD_SPANS:
            return  # not under load: the loader decodes at its own turn
        position = 0
        for item in self._queue:
            if position >= DECODE_AHEAD_WINDOW_LOADS * self._max_batch_spans:
                return
            if self._decodes_ahead(item.batch, item.record, position):
                item.batch = self._decoder.submit(self._decode, item.batch, item.record)
            position += item.spans

    def _decode(self, body: bytes | None, record: Record) -> ArrowBatch:
        """``record``'s rows from its ``body``, or from the spool when it is kept on disk only (None)."""
        decode = self._decode_json if record.kind == KIND_JSON else self._decode_protobuf
        return arrow_batch(decode(self._spool.read(record) if body is None else body), consume=True)

    def _durable(self, records: list[tuple[Record, _Accepted]]) -> None:
        """From the spool's thread, after a sync and before the acks: queue the records for loading."""
        with self._cond:
            for record, accepted in records:
                batch = accepted.payload
                nbytes = record.length if batch is not None else 0
                if batch is not None and self._queued_bytes and self._queued_bytes + nbytes > self._capacity:
                    if isinstance(batch, Future):
                        batch.cancel()
                    batch, nbytes = None, 0  # memory is spent: the loader reads this one back from disk
                    self._metrics.add(spool_spilled=1)
                # Its place counts the load under way (queued until committed): placed after it, a burst's bodies
                # were decoded (holding the GIL) as they came, and acceptance fell a tenth (docs/performance.md).
                if self._decodes_ahead(batch, record, self._queued_spans):
                    batch = self._decoder.submit(self._decode, batch, record)
                self._queue.append(_Item(record, batch, nbytes, accepted.spans))
                self._queued_bytes += nbytes
                self._queued_spans += accepted.spans
            self._metrics.queue_bytes = self._queued_bytes
            self._metrics.spool_bytes = self._spool.bytes
            self._cond.notify_all()
        self._metrics.spool_syncs = self._spool.syncs
        self._metrics.spool_sync_seconds_sum = self._spool.sync_seconds
        self._metrics.spool_records = self._spool.records_written

    def _spool_full(self) -> None:
        self._sync_disk_state()
        with self._cond:
            self._cond.notify_all()  # the loader looks for room while idle

    def reserve(self, nbytes: int, held: int = 0) -> bool:
        """Count ``nbytes`` more of a body being read against the byte budget of bodies in memory.

        ``held``: what the caller has already reserved for the same body. A body is never refused
        while it is the only thing holding the budget, so one upload larger than the budget still gets
        through. Returns False, reserving nothing, when the bytes do not fit: the caller answers 503 and
        releases ``held``.
        """
        with self._cond:
            in_use = self._reserved_bytes
            if self._closing or (in_use - held > 0 and in_use + nbytes > self._capacity):
                return False
            self._reserved_bytes += nbytes
            return True

    def release(self, nbytes: int) -> None:
        """Give back bytes taken by ``reserve`` (the body was handed on, refused or dropped)."""
        with self._cond:
            self._reserved_bytes -= nbytes

    # -- reading your acks -----------------------------------------------------------------------------

    def wait_loaded(self, timeout: float = READ_WAIT_S) -> float:
        """Wait (at most ``timeout``) until every request acked before this call is loaded; returns the lag
        left, in seconds: 0 when caught up, else the age of the oldest accepted record not yet loaded."""
        mark = self._spool.durable_seq
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._loaded_seq >= mark:
                return 0.0
            if self._store.damaged is not None or self._store.disk_full is not None:
                return self._lag_locked()  # nothing is being loaded: waiting would only delay the answer
            self._readers_waiting += 1
            self._cond.notify_all()  # the loader stops waiting for a larger batch
            try:
                while self._loaded_seq < mark:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            finally:
                self._readers_waiting -= 1
            return 0.0 if self._loaded_seq >= mark else self._lag_locked()

    def _lag_locked(self) -> float:
        oldest = self._loading_since or (self._queue[0].record.accepted_ns if self._queue else None)
        if oldest is None:
            return 0.0
        return max(0.0, (time.monotonic_ns() - oldest) / 1e9)

    @property
    def lag_seconds(self) -> float:
        with self._cond:
            return self._lag_locked()

    # -- closing ---------------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Refuse new requests, sync what the spool holds, load everything queued, stop the thread.
        The caller checkpoints the store, then ``release_spool`` deletes what is loaded."""
        with self._cond:
            self._closing = True
        self._spool.close()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout)
        self._decoder.shutdown(wait=False, cancel_futures=True)

    def release_spool(self) -> None:
        """After close and a checkpoint: delete the segments the store has loaded (the rest replay at start)."""
        self._spool.delete_loaded_after_close(self._loaded_seq)
        self._metrics.spool_bytes = self._spool.bytes

    # -- loading ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        cpu_priority.lower_this_thread(self._nice)
        try:
            self._loop()
        except BaseException as e:
            # Only what no turn can catch (SystemExit, a failure of the retry itself): nothing more is loaded
            # until a restart (the spool keeps every acked request), and /healthz must say so.
            logger.critical("the loader thread ended (%r); accepted requests stay in the spool until a restart", e)
            self._metrics.loader_stopped = f"the loader thread ended: {e!r}"  # logged here: not raised again

    def _loop(self) -> None:
        backoff = LOADER_RETRY_S
        while (items := self._take()) is not None:
            try:
                self._step(items)
                backoff = LOADER_RETRY_S
                self._warn_if_behind()
            except Exception:  # deliberate: one failed turn must not end the thread while the acks go on
                logger.exception("the loader failed; retrying the same requests in %.1f s", backoff)
                self._retry(items, backoff)
                backoff = min(backoff * 2, LOADER_RETRY_MAX_S)

    def _retry(self, items: list[_Item], pause: float) -> None:
        """After a failure anywhere in one turn: the items not loaded go back to the head of the queue (unless
        the failure put them back already), and the loader pauses before trying them again."""
        with self._cond:
            left = [item for item in items if item.record.seq > self._loaded_seq]
            if left and not (self._queue and self._queue[0].record.seq == left[0].record.seq):
                self._queue.extendleft(reversed(left))
            self._loading_since = None
        self._sync_disk_state()
        time.sleep(pause)

    def _step(self, items: list[_Item]) -> None:
        """One turn of the loader: upkeep when ``items`` is empty (idle, or a full disk), else a load."""
        if not items:
            if self._store.disk_full is not None or self._spool.disk_full is not None:
                self._recover()
            elif self._store.damaged is None:
                self._idle_upkeep()
            return
        if self._commit_delay:
            time.sleep(self._commit_delay)
        if not self._load(items):
            return
        with self._cond:
            idle = not self._queue
        nbytes = sum(item.record.length for item in items)
        self._since_checkpoint += nbytes
        self._committed_since_compaction = True
        unreleased = self._spool.bytes > upkeep.CHECKPOINT_SPOOL_FRACTION * self._spool.capacity
        if (idle and self._since_checkpoint >= upkeep.CHECKPOINT_EVERY_BYTES) or unreleased:
            # Under load a fold is always running: the spool's room cannot wait for an idle moment.
            self._checkpoint(wait=unreleased)
        if idle and time.monotonic() - self._compacted_at >= self._compact_every_s:
            self._compact()

    def _take(self) -> list[_Item] | None:
        with self._cond:
            while True:
                if self._closing and (self._store.disk_full is not None or self._store.damaged is not None):
                    return None  # nothing more can be loaded now: the spool keeps the rest for the next start
                if self._store.disk_full is not None:
                    left = self._recover_at - time.monotonic()
                    if left <= 0:
                        return []
                    self._cond.wait(left)
                    continue
                if self._store.damaged is not None:
                    # Nothing more can be loaded; the spool keeps every accepted body for a repaired store.
                    if self._closing:
                        return None
                    self._cond.wait()
                    continue
                if self._spool.disk_full is not None and not self._queue and not self._closing:
                    left = self._recover_at - time.monotonic()
                    if left <= 0:
                        return []
                    self._cond.wait(left)
                    continue
                if self._queue:
                    now = time.monotonic_ns()
                    oldest = (now - self._queue[0].record.accepted_ns) / 1e9
                    quiet = (now - self._queue[-1].record.accepted_ns) / 1e9
                    if (self._closing or self._readers_waiting or self._queued_spans >= self._max_batch_spans
                            or quiet >= self._load_interval_s or oldest >= self._load_max_wait_s):
                        break
                    self._cond.wait(min(self._load_interval_s - quiet, self._load_max_wait_s - oldest))
                    continue
                if self._closing:
                    return None
                # Idle: wake in time to compact spans unchecked, or to retry a checkpoint the spool's room
                # waits for, unless work arrives first.
                waits = [w for w in (self._compaction_wait(), self._release_wait()) if w is not None]
                if waits and min(waits) <= 0:
                    return []
                self._cond.wait(min(waits) if waits else None)
            taken: list[_Item] = []
            spans = 0
            while self._queue and (not taken or spans < self._max_batch_spans):
                item = self._queue.popleft()
                taken.append(item)
                spans += item.spans
            self._loading_since = taken[0].record.accepted_ns
            self._decode_window_locked()
            return taken

    def _compaction_wait(self) -> float | None:
        if not self._committed_since_compaction:
            return None
        return self._compact_every_s - (time.monotonic() - self._compacted_at)

    def _idle_upkeep(self) -> None:
        """Idle: the checkpoint the spool waits for (one after a load failed or was skipped: with the spool at
        its bound no load comes to run the next), then compaction when due."""
        if self._release_wait() == 0:
            self._checkpoint(wait=True)
        wait = self._compaction_wait()
        if wait is not None and wait <= 0:
            self._compact()
            self._prune()

    def _batch(self, item: _Item) -> ArrowBatch | None:
        """The item's batch, decoded again from the spool when it was kept on disk only; None when the
        record cannot be read or decoded (set aside, counted)."""
        if isinstance(item.batch, ArrowBatch):
            return item.batch
        if isinstance(item.batch, Future) and not item.batch.cancelled():
            try:
                return item.batch.result()
            except Exception as e:  # the decode thread failed (MemoryError, say): decoded again from the spool
                logger.warning("decoding spool record %d ahead failed (%r); decoding it again", item.record.seq, e)
                item.batch = None  # counted as the future was (an estimate): the queue's sums stay right
        try:
            return self._decode(item.batch if isinstance(item.batch, bytes) else None, item.record)
        except (OSError, ValueError, BadPayload) as e:
            # A record the spool synced and its check accepted cannot fail here but for damage to the
            # file; it is counted and skipped rather than block every record behind it.
            logger.error("spool record %d cannot be loaded: %s", item.record.seq, e)
            self._metrics.add(spool_unloadable=1)
            return None

    def _load(self, items: list[_Item]) -> bool:
        """Append ``items`` in one transaction with the spool position they reach; True once loaded."""
        started = time.perf_counter()
        batches = [b for b in (self._batch(item) for item in items) if b is not None]
        last = items[-1].record.seq
        try:
            result = self._store.append(batches, spool_seq=last)
            faults.point("loader.committed")
        except Exception as e:
            if is_disk_full(e) or isinstance(e, StoreDiskFull):
                self._put_back(items)  # kept in order; loaded once the store has room again
                self._sync_disk_state()
                return False
            if is_corruption(e) or isinstance(e, StoreCorrupt):
                self._put_back(items)
                logger.error("the store is damaged; accepted requests stay in the spool: %s", e)
                return False
            if is_transient(e):
                logger.warning("loading %d requests failed; retrying: %s", len(items), e)
                self._put_back(items)
                time.sleep(upkeep.RECOVER_EVERY_S)
                return False
            # One request the store cannot take must not block the others it was grouped with: each alone.
            logger.warning("loading %d requests together failed; loading one by one", len(items))
            return self._load_one_by_one(items)
        self._loaded(items, result.inserted, result.duplicates, time.perf_counter() - started)
        return True

    def _load_one_by_one(self, items: list[_Item]) -> bool:
        for index, item in enumerate(items):
            started = time.perf_counter()
            batch = self._batch(item)
            try:
                result = self._store.append([batch] if batch is not None else [], spool_seq=item.record.seq)
            except Exception as e:
                if isinstance(e, StoreDiskFull | StoreCorrupt) or is_corruption(e) or is_transient(e):
                    self._put_back(items[index:])
                    self._sync_disk_state()
                    return False
                # The data's fault: this request can never be stored. It is skipped (its position recorded
                # alone), counted and logged with its sequence number; its body stays in the spool's file.
                logger.exception("spool record %d cannot be stored; skipped", item.record.seq)
                try:
                    self._store.mark_spool_position(item.record.seq)
                except Exception:
                    self._put_back(items[index:])  # tried again: a skip is recorded or nothing moves
                    raise
                self._metrics.add(spool_unloadable=1)
                self._loaded([item], 0, 0, time.perf_counter() - started)
                continue
            self._loaded([item], result.inserted, result.duplicates, time.perf_counter() - started)
        return True

    def _put_back(self, items: list[_Item]) -> None:
        with self._cond:
            self._queue.extendleft(reversed(items))
            self._loading_since = None

    def _loaded(self, items: list[_Item], inserted: int, duplicates: int, seconds: float) -> None:
        now = time.monotonic_ns()
        lags = [(now - item.record.accepted_ns) / 1e9 for item in items]
        spans = sum(item.batch.span_count if isinstance(item.batch, ArrowBatch) else 0 for item in items)
        with self._cond:
            self._loaded_seq = items[-1].record.seq
            self._loading_since = None
            self._queued_bytes -= sum(item.nbytes for item in items)
            self._queued_spans -= sum(item.spans for item in items)
            self._metrics.queue_bytes = self._queued_bytes
            self._cond.notify_all()
        self._metrics.observe_commit(seconds)
        self._metrics.observe_load(lags, inserted + duplicates or spans)
        self._metrics.add(spans_accepted=inserted, spans_duplicate=duplicates)
        self._metrics.spool_bytes = self._spool.bytes
        self._sync_disk_state()

def spool_directory(db: Path) -> Path:
    """Where a store's spool lives by default: beside it, named after it."""
    return db.with_name(db.name + ".spool")


def _estimated_spans(record: Record) -> int:
    """The spans of a record read back from the spool at start, whose check's count is gone: an estimate from
    its size (so one load never decodes more than about ``max_batch_spans`` worth of bodies at once)."""
    return max(1, record.length // 256)


def _restamped(record: Record, accepted_ns: int) -> Record:
    return Record(record.seq, record.kind, record.segment, record.offset, record.length, accepted_ns)
