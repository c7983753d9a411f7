"""The spool: each accepted request body, durable on disk before its ack, until the store has loaded it.

A DuckDB commit costs 7-25 ms here while an append of the same bytes plus ``fdatasync`` costs under a
millisecond, so the ack waits for the spool, not the store (as Kafka, the Collector's persistent queue and
ClickHouse's async inserts separate acceptance from the table write). Bodies are appended to segment files
as records, many requests per ``fdatasync`` under load (group sync: one thread takes whatever is waiting),
and only then are their futures resolved. The loader (writer.py) appends them to DuckDB and records the
last sequence number it loaded in the same transaction; on start every record past it is replayed, so each
acked request is loaded exactly once. Segments wholly loaded are deleted once the store has checkpointed.

Record: a 24-byte header (magic, kind, body length, sequence number, CRC-32 of the header's other fields
and the body), then the body. A crash leaves at most a torn record at the end of the last segment (never
acked: its sync had not returned): opening truncates it. A bad record anywhere else is damage: that
segment is set aside (``.damaged``) and counted, never loaded half.

A full disk (ENOSPC) fails only the requests of the group being written (retryable: StoreDiskFull), the
segment is cut back to its last whole record, and new requests are refused until the file system has room
again; nothing acked is touched.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.observe.errors import StoreDiskFull
from lousho.observe.store import faults

logger = logging.getLogger(__name__)

KIND_PROTOBUF = 1
KIND_JSON = 2
_KINDS = (KIND_PROTOBUF, KIND_JSON)
_MAGIC = b"LSP1"
_HEADER = struct.Struct("<4sB3xIQI")  # magic, kind, body length, sequence number, crc32
_SUFFIX = ".seg"
MIB = 1024 * 1024
# A segment is closed and a new one begun past this size: segments are deleted whole, so this is also how
# much loaded data can wait for deletion in the active one.
SEGMENT_BYTES = 64 * MIB
# After a full disk, new requests are taken again once the file system has this much room.
RESUME_FREE_BYTES = 8 * MIB
# While full, look for room at most this often (a statvfs per look).
RECHECK_FULL_S = 0.5


def default_capacity(directory: Path) -> int:
    """The spool's bound when none is given: a quarter of the free disk, between 64 MiB and 4 GiB."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        free = 0
    return max(64 * MIB, min(free // 4, 4096 * MIB))


@dataclass(frozen=True)
class Record:
    """Where one accepted body lies: its segment, the offset of the body, its length."""

    seq: int
    kind: int
    segment: Path
    offset: int
    length: int
    accepted_ns: int  # when its sync returned (monotonic_ns): the loader's lag is measured from it


@dataclass
class _Pending:
    body: bytes
    kind: int
    payload: Any
    future: Future[Record]


@dataclass
class _Segment:
    path: Path
    first_seq: int
    last_seq: int  # 0 while empty
    size: int


class Spool:
    """Segment files in ``directory``; one thread writes and syncs, ``on_durable`` hears each group in order.

    ``on_durable(records_and_payloads)`` runs on the spool's thread after the sync and before the futures are
    resolved, so the loader has every record before any of its acks is sent, in sequence order.
    """

    def __init__(
        self,
        directory: Path,
        *,
        capacity_bytes: int,
        loaded_seq: int,
        on_durable: Callable[[list[tuple[Record, Any]]], None],
        on_full: Callable[[], None] = lambda: None,
        segment_bytes: int = SEGMENT_BYTES,
    ) -> None:
        self.directory = directory
        self._capacity = capacity_bytes
        self._segment_bytes = max(64 * 1024, min(segment_bytes, capacity_bytes // 4 or segment_bytes))
        self._on_durable = on_durable
        self._on_full = on_full  # told when the disk is found full, and when room is found again
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._pending_bytes = 0
        self._closing = False
        self._release_to: int | None = None
        self.disk_full: StoreDiskFull | None = None
        self._full_checked = 0.0
        self.damaged_segments = 0
        self.syncs = 0
        self.sync_seconds = 0.0
        self.records_written = 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreDiskFull(f"cannot create the spool {directory}: {e.strerror}") from None
        self._segments, self.replay = self._open(loaded_seq)
        last = max([loaded_seq, *(s.last_seq for s in self._segments)])
        self._next_seq = last + 1
        self.durable_seq = last  # the newest record whose sync returned (acked or about to be)
        self._fd: int | None = None
        self._thread = threading.Thread(target=self._run, name="lousho-spool", daemon=True)
        self._thread.start()

    # -- opening ---------------------------------------------------------------------------------------

    def _open(self, loaded_seq: int) -> tuple[list[_Segment], list[Record]]:
        """The segments on disk and the records past ``loaded_seq`` to replay, in order."""
        paths = sorted(p for p in self.directory.iterdir() if p.name.endswith(_SUFFIX))
        segments: list[_Segment] = []
        replay: list[Record] = []
        for index, path in enumerate(paths):
            last = index == len(paths) - 1
            records, good_end, bad = _scan(path)
            if bad and not last:
                # Synced records sit past this point: not a torn tail but damage. Nothing of it is loaded
                # half; the file stays for inspection.
                logger.error("spool segment %s is damaged at byte %d; set aside, its records are not loaded",
                             path, good_end)
                path.rename(path.with_suffix(".damaged"))
                self.damaged_segments += 1
                continue
            if bad:
                # The torn end of the last segment: a write whose sync never returned, so never acked.
                logger.warning("spool segment %s ends in a torn record at byte %d: cut off (it was never acked)",
                               path, good_end)
                with path.open("r+b") as f:
                    f.truncate(good_end)
                    os.fsync(f.fileno())
            if last and not records:
                # Empty (a full disk at its first record, or a crash before its first sync): it holds nothing,
                # and the first write of this run would open the same name again; kept, it would be a second
                # entry for the live file, and the first release would delete that file under acked records.
                path.unlink()
                _sync_directory(self.directory)
                continue
            first = int(path.name[: -len(_SUFFIX)])
            segment = _Segment(path, first, records[-1].seq if records else 0, good_end)
            segments.append(segment)
            replay.extend(r for r in records if r.seq > loaded_seq)
        return segments, replay

    # -- accepting -------------------------------------------------------------------------------------

    @property
    def bytes(self) -> int:
        """Bytes on disk, loaded or not, plus bodies waiting for their write."""
        return sum(s.size for s in self._segments) + self._pending_bytes

    @property
    def capacity(self) -> int:
        return self._capacity

    def full(self) -> StoreDiskFull | None:
        """The disk-full error while the spool's file system has no room (looked at again every
        ``RECHECK_FULL_S``), else None."""
        if self.disk_full is not None and not self._room_again():
            return self.disk_full
        return None

    def has_room(self, nbytes: int) -> bool:
        """Whether a body of ``nbytes`` fits the spool's bound now (``full`` says whether the disk has room)."""
        with self._cond:
            used = self.bytes
            return used == 0 or used + nbytes + _HEADER.size <= self._capacity

    def _room_again(self) -> bool:
        now = time.monotonic()
        if now - self._full_checked < RECHECK_FULL_S:
            return False
        self._full_checked = now
        try:
            free = shutil.disk_usage(self.directory).free
        except OSError:
            return False
        if free < RESUME_FREE_BYTES:
            return False
        logger.warning("the spool's disk has room again: taking spans")
        self.disk_full = None
        self._on_full()
        return True

    def append(self, body: bytes, kind: int, payload: Any = None) -> Future[Record]:
        """Queue ``body`` for the next group write; the future resolves once it is synced.

        ``payload`` (the decoded batch) travels with the record to ``on_durable``."""
        if kind not in _KINDS:
            raise ValueError(f"unknown record kind {kind}")
        future: Future[Record] = Future()
        with self._cond:
            if self._closing:
                future.set_exception(RuntimeError("the spool is closed"))
                return future
            self._pending.append(_Pending(body, kind, payload, future))
            self._pending_bytes += len(body) + _HEADER.size
            self._cond.notify()
        return future

    def read(self, record: Record) -> bytes:
        """The body of ``record``, checked against its CRC."""
        with record.segment.open("rb") as f:
            f.seek(record.offset - _HEADER.size)
            head = f.read(_HEADER.size)
            body = f.read(record.length)
        _magic, kind, length, seq, crc = _HEADER.unpack(head)
        if seq != record.seq or length != record.length or _crc(head, body) != crc:
            raise ValueError(f"spool record {record.seq} in {record.segment} does not read back whole")
        return body

    # -- writing ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing and self._release_to is None:
                    self._cond.wait()
                group, self._pending = self._pending, []
                release_to, self._release_to = self._release_to, None
                closing = self._closing
            if release_to is not None:
                self._delete_loaded(release_to)  # first: the group below may then begin a new segment
            if group:
                # Running from here: a waiter that goes away (a cancelled HTTP request) can no longer cancel
                # its future, whose resolution would then raise on this thread and end it. One cancelled
                # before is dropped: never written, never acked.
                taken = [p for p in group if p.future.set_running_or_notify_cancel()]
                try:
                    if taken:
                        self._write(taken)
                finally:
                    with self._cond:
                        self._pending_bytes -= sum(len(p.body) + _HEADER.size for p in group)
            if closing and not group:
                break
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, group: list[_Pending]) -> None:
        started = time.perf_counter()
        first_seq = self._next_seq
        touched: dict[Path, tuple[_Segment, int, int]] = {}  # segment -> its size and last seq before the group
        written: list[tuple[Record, _Pending]] = []
        try:
            for item in group:
                segment = self._active(len(item.body) + _HEADER.size)
                touched.setdefault(segment.path, (segment, segment.size, segment.last_seq))
                seq = self._next_seq
                head = _header(item.kind, item.body, seq)
                if os.writev(self._fd, [head, item.body]) != len(head) + len(item.body):  # type: ignore[arg-type]
                    raise OSError(errno.ENOSPC, "short write: no room for the whole record")
                written.append((Record(seq, item.kind, segment.path, segment.size + _HEADER.size,
                                       len(item.body), 0), item))
                segment.size += _HEADER.size + len(item.body)
                segment.last_seq = seq
                self._next_seq = seq + 1
            faults.point("spool.written")
            os.fdatasync(self._fd)  # type: ignore[arg-type]
        except (OSError, MemoryError) as e:
            # MemoryError: the daemon at its memory cap (memory_cap.py) while a query held memory; retryable too.
            self._fail(group, touched, first_seq, e)
            return
        now = time.monotonic_ns()
        records = [(Record(r.seq, r.kind, r.segment, r.offset, r.length, now), item) for r, item in written]
        self.syncs += 1
        self.sync_seconds += time.perf_counter() - started
        self.records_written += len(records)
        self.durable_seq = records[-1][0].seq
        faults.point("spool.synced")
        self._on_durable([(record, item.payload) for record, item in records])
        for record, item in records:
            item.future.set_result(record)

    def _fail(self, group: list[_Pending], touched: dict[Path, tuple[_Segment, int, int]], first_seq: int,
              error: OSError | MemoryError) -> None:
        """Nothing of this group is acked: every segment it touched is cut back to where it was."""
        for segment, size, last_seq in touched.values():
            try:
                os.truncate(segment.path, size)
            except OSError:
                logger.exception("cutting the spool segment %s back after a failed write failed", segment.path)
            segment.size, segment.last_seq = size, last_seq
        self._next_seq = first_seq
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            self.disk_full = StoreDiskFull(f"the disk holding the spool {self.directory} is full: {error.strerror}")
            self._full_checked = time.monotonic()
            failure: Exception = self.disk_full
            logger.error("%s; refusing spans (503) until there is room", self.disk_full.message)
            self._on_full()
        else:
            failure = error
            logger.error("writing the spool failed: %s", error)
        for item in group:
            item.future.set_exception(failure)

    def _active(self, nbytes: int) -> _Segment:
        """The segment to append to: a new one at the first write after a start, or when this one is full."""
        current = self._segments[-1] if self._segments else None
        if self._fd is not None and current is not None:
            if current.size == 0 or current.size + nbytes <= self._segment_bytes:
                return current
            os.fdatasync(self._fd)  # its records of this group must be synced before it is let go
            os.close(self._fd)
            self._fd = None
        path = self.directory / f"{self._next_seq:020d}{_SUFFIX}"
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o600)
        with self._cond:
            if current is not None and current.path == path:
                # The same file again (emptied: O_TRUNC): one entry per file, or a release of the stale one
                # would delete the live file.
                segment = current
                segment.size, segment.last_seq = 0, 0
            else:
                segment = _Segment(path, self._next_seq, 0, 0)
                self._segments.append(segment)
        try:
            _sync_directory(self.directory)  # the new file's name must survive a crash with its records
        except OSError:
            os.close(self._fd)  # the next write opens it again and syncs its name then
            self._fd = None
            raise
        return segment

    # -- releasing -------------------------------------------------------------------------------------

    def release(self, loaded_seq: int) -> None:
        """The store has loaded and checkpointed every record up to ``loaded_seq``: the spool's thread
        deletes the segments wholly behind it."""
        with self._cond:
            self._release_to = max(loaded_seq, self._release_to or 0)
            self._cond.notify()

    def _delete_loaded(self, loaded_seq: int) -> None:
        """On the spool's thread, between groups (every record written is synced): delete the segments wholly
        loaded, the one being written too (the next write begins a new one)."""
        with self._cond:
            segments = list(self._segments)
        keep: list[_Segment] = []
        for index, segment in enumerate(segments):
            if segment.last_seq > loaded_seq:
                keep.append(segment)
                continue
            if index == len(segments) - 1 and self._fd is not None:
                os.close(self._fd)
                self._fd = None
            elif self._fd is not None and segment.path == segments[-1].path:
                continue  # a stale entry naming the file being written: that file holds records not loaded
            segment.path.unlink(missing_ok=True)
            faults.point("spool.deleted")
        with self._cond:
            self._segments = keep + [s for s in self._segments if s not in segments]

    def close(self) -> None:
        """Write what is waiting, then stop. Segments stay until released (at the next start if need be)."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()

    def delete_loaded_after_close(self, loaded_seq: int) -> None:
        """After ``close``: delete every segment the store has loaded and checkpointed."""
        self._delete_loaded(loaded_seq)


def iter_records(path: Path) -> Iterator[Record]:
    """Every whole record of one segment file, in order (for tools and tests)."""
    records, _end, _bad = _scan(path)
    yield from records


def _scan(path: Path) -> tuple[list[Record], int, bool]:
    """The whole records of ``path``, the offset where they end, and whether a bad or torn one follows."""
    records: list[Record] = []
    data = path.read_bytes()
    offset = 0
    while offset < len(data):
        if len(data) - offset < _HEADER.size:
            return records, offset, True
        head = data[offset : offset + _HEADER.size]
        magic, kind, length, seq, crc = _HEADER.unpack(head)
        end = offset + _HEADER.size + length
        if magic != _MAGIC or kind not in _KINDS or end > len(data):
            return records, offset, True
        if _crc(head, data[offset + _HEADER.size : end]) != crc:
            return records, offset, True
        records.append(Record(seq, kind, path, offset + _HEADER.size, length, 0))
        offset = end
    return records, offset, False


def _header(kind: int, body: bytes, seq: int) -> bytes:
    head = _HEADER.pack(_MAGIC, kind, len(body), seq, 0)
    return _HEADER.pack(_MAGIC, kind, len(body), seq, _crc(head, body))


def _crc(head: bytes, body: bytes) -> int:
    return zlib.crc32(body, zlib.crc32(head[: _HEADER.size - 4])) & 0xFFFFFFFF


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
