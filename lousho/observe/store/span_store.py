"""The DuckDB span store: one read-write connection that appends, cursors that read.

Only the daemon opens the file read-write (DuckDB allows one writing process); everything else
reads through the daemon's SQL API or opens the file read-only (``open_read_only``). Every failure to
open is a coded error (``store_damage.open_error``); the daemon also reads every table once at start
and refuses a damaged store (``LOUSHO_STORE_CORRUPT``) rather than serving it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lousho.kernel import cpu_priority
from lousho.observe.decode import otlp_native
from lousho.observe.decode.otlp_decode import SCORE_FIELDS, SPAN_FIELDS, Decoded
from lousho.observe.errors import ObserveError, StoreCorrupt, StoreDiskFull, StoreMissing, StoreUnwritable
from lousho.observe.runs import runs_table
from lousho.observe.runs.runs_fold import FoldStats, RunsFold
from lousho.observe.store import local_window, schema, store_compaction, store_damage
from lousho.observe.store.recent_keys import DEFAULT_CAPACITY, RecentKeys, first_occurrences

logger = logging.getLogger(__name__)

# No file or network access from SQL, for the daemon's own connection as for readers: the SQL API
# shares this database instance. Arrow batches the writer registers are in memory, not files.
_CONFIG = {"enable_external_access": False, "autoinstall_known_extensions": False,
           "autoload_known_extensions": False}
# DuckDB checkpoints automatically inside a commit once its WAL passes a threshold (16 MiB by default):
# that commit, and every request acked by it, waits for the whole checkpoint (seconds once the store
# is large). The writer checkpoints when it is idle instead; this bound only caps the WAL (and crash
# replay) under load that never lets up.
_WRITER_CONFIG = {**_CONFIG, "checkpoint_threshold": "256MB"}
# Rows per row group the writer gives the tables (DuckDB's default: 122,880). A transaction that adds at least a
# row group of rows to a table has them written straight to the file, compressed, and its commit writes only their
# place to the WAL; a smaller one writes every row to the WAL (480-730 bytes a span here, more for the fold's wide
# rows) and again at the checkpoint. With smaller groups, most of a busy loader's loads and of the fold's writes (a
# row per run: one per span when every span is a run) take the first way. DuckDB takes the size when it attaches a
# file, as a setting of that attachment (the file does not keep it), hence ``_connect_writer``. Readers of any
# size's groups read the others'.
ROW_GROUP_ROWS = 16_384
# The store's catalog name when the file's own stem would clash with DuckDB's.
_FALLBACK_CATALOG = "store"
_RESERVED_CATALOGS = frozenset({"memory", "system", "temp", "main"})
# After a full disk, ``recover`` tries again only once the file system has this much room: a commit needs
# little, but a checkpoint that finds no room invalidates the database and costs a reopen.
RESUME_FREE_BYTES = 8 * 1024 * 1024

_SPAN_TYPES: dict[str, pa.DataType] = {
    "key_hi": pa.uint64(), "key_lo": pa.uint64(), "start_ns": pa.int64(), "end_ns": pa.int64(),
    "input_tokens": pa.int64(), "output_tokens": pa.int64(), "cost_usd": pa.float64(), "probe": pa.bool_(),
    "cache_read_tokens": pa.int64(), "cache_creation_tokens": pa.int64(), "reasoning_tokens": pa.int64(),
    "resource_key": pa.int64(),
}
_SCORE_TYPES: dict[str, pa.DataType] = {
    "key_hi": pa.uint64(), "key_lo": pa.uint64(), "seq": pa.int32(), "score_value": pa.float64(),
    "passed": pa.bool_(), "time_ns": pa.int64(),
}
SPAN_SCHEMA = pa.schema([(f, _SPAN_TYPES.get(f, pa.string())) for f in SPAN_FIELDS])
SCORE_SCHEMA = pa.schema([(f, _SCORE_TYPES.get(f, pa.string())) for f in SCORE_FIELDS])
RESOURCE_SCHEMA = pa.schema([("resource_key", pa.int64()), ("resource", pa.string())])
otlp_native.check_storage(SPAN_SCHEMA, SCORE_SCHEMA)

_KEY = "((key_hi::UHUGEINT << 64) | key_lo::UHUGEINT)"
_SPAN_COLUMNS = [f for f in SPAN_FIELDS if f not in ("key_hi", "key_lo")]
# Plain INSERTs: the writer has already dropped the spans (and their scores) the store holds (RecentKeys).
# Parameters: received_ns, then commit_seq (one number per commit, rising: what the kept runs fold by,
# runs_table.py).
_INSERT_SPANS = (
    f"INSERT INTO span_rows (span_key, {', '.join(_SPAN_COLUMNS)}, duration_ns, received_ns, commit_seq) "
    f"SELECT {_KEY}, {', '.join(_SPAN_COLUMNS)}, end_ns - start_ns, ?, ? FROM span_batch"
)
# A resource is stored once: the batch's resources the table already holds (from an earlier commit, or before a
# restart) are left out. The resources table is small (one row per distinct resource), so the check is one scan of
# its keys, and only for a key this process has not stored yet (``SpanStore._stored_resources``).
_INSERT_RESOURCES = ("INSERT INTO resources SELECT b.resource_key, b.resource FROM resource_batch b "
                     "ANTI JOIN resources r ON r.resource_key = b.resource_key")
# The resource keys remembered as stored; past this many the memory is cleared (the insert's check stays exact).
_STORED_RESOURCES_MAX = 100_000
_SCORE_COLUMNS = [f for f in SCORE_FIELDS if f not in ("key_hi", "key_lo")]
_INSERT_SCORES = (
    f"INSERT INTO scores (span_key, {', '.join(_SCORE_COLUMNS)}, commit_seq) "
    f"SELECT {_KEY}, {', '.join(_SCORE_COLUMNS)}, ? FROM score_batch"
)
# A copy that got past the filter may have been folded into the kept runs already (counted twice there):
# compaction that removes one drops the kept tables, and the next fold makes them again from the spans.
_REFOLD = runs_table.REBUILD
_SPOOL_POSITION = "SELECT loaded_seq FROM lousho_spool"
_MARK_SPOOL = "UPDATE lousho_spool SET loaded_seq = ?"
_LAST_COMMIT_SEQ = ("SELECT greatest((SELECT coalesce(max(commit_seq), 0) FROM spans), "
                    "(SELECT coalesce(max(commit_seq), 0) FROM scores))")


@dataclass(frozen=True)
class AppendResult:
    inserted: int
    duplicates: int


@dataclass(frozen=True)
class ArrowBatch:
    """A decoded request's rows as the store appends them."""

    spans: pa.Table
    scores: pa.Table
    # The distinct resources ``spans.resource_key`` names, each once.
    resources: pa.Table = field(default_factory=RESOURCE_SCHEMA.empty_table)

    @property
    def span_count(self) -> int:
        return self.spans.num_rows


def arrow_batch(decoded: Decoded, *, consume: bool = False) -> ArrowBatch:
    """The Arrow tables of ``decoded``; ``consume`` lets go of its columns as they are converted.

    The native decoder's spans are Arrow buffers already (wrapped, not copied); the reference decoder's are
    lists, converted here. The daemon converts in the thread that decoded the request, off the writer's serial
    path, and consumes, so nothing but the tables is kept alive while the request waits for its commit.
    """
    if isinstance(decoded, otlp_native.NativeDecoded):
        spans = decoded.span_table(SPAN_SCHEMA, consume=consume)
        scores = decoded.score_table(SCORE_SCHEMA, consume=consume)
    else:
        spans = _table(decoded.spans, SPAN_SCHEMA, consume)
        scores = _table(decoded.scores, SCORE_SCHEMA, consume)
    return ArrowBatch(spans, scores, _resources(decoded, spans, consume))


def _resources(decoded: Decoded, spans: pa.Table, consume: bool) -> pa.Table:
    """The resources the spans name, one row each, in key order (a resource whose spans were all rejected is
    left out)."""
    named = set(pc.unique(spans.column("resource_key")).to_pylist()) if spans.num_rows else set()
    keys = sorted(key for key in decoded.resources if key in named)
    table = pa.Table.from_arrays([pa.array(keys, pa.int64()), pa.array([decoded.resources[k] for k in keys],
                                                                        pa.string())], schema=RESOURCE_SCHEMA)
    if consume:
        decoded.resources.clear()
    return table


def decode_for_store(decoder: Callable[[bytes], Decoded], body: bytes) -> tuple[Decoded, ArrowBatch]:
    """Decode ``body`` and convert it for the writer; the Decoded keeps only its counts and errors."""
    decoded = decoder(body)
    return decoded, arrow_batch(decoded, consume=True)


class SpanStore:
    """The read-write store. Not thread-safe for writes: one writer thread owns ``append`` and ``compact``.

    A span is stored once per (trace_id, span_id): ``append`` drops the keys the recent-key filter holds (the
    newest ``dedup_window`` spans, loaded at open) and repeats within its batches; ``compact`` removes the rare
    copy that got past it (its twin older than the window). Opening compacts what the last run left unchecked.

    Once a commit or checkpoint fails in a way that means the file is damaged, the store is
    ``damaged``: ``on_damage`` is told once, and every later ``append`` raises the same StoreCorrupt
    without touching DuckDB (which has invalidated the database by then).

    A full disk is not damage (store_damage.is_disk_full): the store is ``disk_full`` until ``recover``
    finds room again; the commit that failed raises StoreDiskFull (retryable) and is rolled back. When
    the failure was a checkpoint's, DuckDB has invalidated the database; ``recover`` opens it again, which
    replays the WAL, so every span committed before is there. Memory refused (memory_cap.py) is not damage
    either: the error is raised as it is (retryable), and the database opened again before the next statement.

    The kept runs are folded at open, at close and, with ``fold_thread``, by a thread of their own in
    between (runs_fold.py); without it only when ``fold`` is called (``runs`` is exact either way).
    """

    def __init__(
        self,
        path: Path,
        *,
        memory_limit: str | None = None,
        verify: bool = True,
        fold_thread: bool = True,
        on_damage: Callable[[StoreCorrupt], None] | None = None,
        dedup_window: int = DEFAULT_CAPACITY,
        background_nice: int = 0,
    ) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreUnwritable(f"cannot create the directory {path.parent}: {e.strerror}") from None
        config = dict(_WRITER_CONFIG)
        if memory_limit:
            config["memory_limit"] = memory_limit
        self.path = path
        self._catalog = _catalog(path)
        self.damaged: StoreCorrupt | None = None
        self.disk_full: StoreDiskFull | None = None
        self._invalidated = False  # by a fatal error (a full disk, memory refused): DuckDB refuses all until reopened
        self._config = config
        self._fold_thread = fold_thread
        # DuckDB's workers run this much below the request path, the fold further (cpu_priority.py).
        self._nice = background_nice
        self._fold_nice = cpu_priority.fold_nice(background_nice)
        self._on_damage = on_damage
        self._recent = RecentKeys(dedup_window)
        self._stored_resources: set[int] = set()  # resource keys known to be in the resources table
        self._con = self._open()
        try:
            schema.migrate(self._con)
            if verify:
                store_damage.verify_tables(self._con, path)
            lock_configuration(self._con)
            # Compaction first: the fold then never counts a copy that got past the filter before a restart.
            self.compacted_at_open = store_compaction.compact(self._con, _REFOLD)
            store_compaction.load_recent(self._con, self._recent)
            self._commit_seq = int(self._con.execute(_LAST_COMMIT_SEQ).fetchall()[0][0])
            self._fold = RunsFold(self._cursor())
            self._fold.fold_now()
            if fold_thread:
                self._fold.start(self._fold_nice)
        except duckdb.Error as e:
            self._con.close()
            raise store_damage.open_error(path, e) from None
        except BaseException:
            self._con.close()
            raise

    def append(self, batches: Sequence[Decoded | ArrowBatch], spool_seq: int | None = None) -> AppendResult:
        """Insert the spans and scores of ``batches`` in one transaction; duplicates are dropped.

        ``spool_seq``: the last spool record these batches come from, recorded in the same transaction (a
        restart replays only the records past it). Raises StoreCorrupt once the file is known to be damaged."""
        if self.damaged is not None:
            raise self.damaged
        if self.disk_full is not None and self._invalidated:
            raise self.disk_full
        self._revive()
        converted = [b if isinstance(b, ArrowBatch) else arrow_batch(b) for b in batches]
        spans = _concat([b.spans for b in converted], SPAN_SCHEMA)
        scores = _concat([b.scores for b in converted], SCORE_SCHEMA)
        hi, lo = _keys(spans)
        fresh = self._recent.fresh(hi, lo)
        inserted = int(fresh.sum())
        if inserted < spans.num_rows:
            spans = spans.filter(fresh)
        if scores.num_rows:
            # A score belongs to its span's copy: kept when the span is new, once per (span, seq).
            score_hi, score_lo = _keys(scores)
            seq = scores.column("seq").to_numpy()
            keep = ~self._recent.held(score_hi, score_lo) & first_occurrences(score_hi, score_lo, seq)
            if not keep.all():
                scores = scores.filter(keep)
        if inserted:
            resources = self._new_resources([b.resources for b in converted])
            self._insert(spans, scores, resources, spool_seq)
            self._recent.add(hi[fresh], lo[fresh])
            self._remember_resources(resources)
        elif spool_seq is not None:
            self.mark_spool_position(spool_seq)  # nothing new to insert: the position moves all the same
        return AppendResult(inserted=inserted, duplicates=len(fresh) - inserted)

    def _new_resources(self, tables: list[pa.Table]) -> pa.Table:
        """The batches' resources not known to be stored, each key once. A resource of the dropped (re-sent) spans
        only may be among them: stored once, harmless."""
        table = _concat(tables, RESOURCE_SCHEMA)
        seen = set(self._stored_resources)
        keep = []
        for key in table.column("resource_key").to_pylist():
            keep.append(key not in seen)
            seen.add(key)
        return table if all(keep) else table.filter(pa.array(keep, pa.bool_()))

    def _remember_resources(self, resources: pa.Table) -> None:
        if len(self._stored_resources) + resources.num_rows > _STORED_RESOURCES_MAX:
            self._stored_resources.clear()
        self._stored_resources.update(resources.column("resource_key").to_pylist())

    def raise_commit_seq(self, floor: int) -> None:
        """Number the next commits above ``floor``: a copy of the numbers kept elsewhere (the lake's position,
        lake/lake_shipper.py) must never be handed out again, even after compaction removed the newest rows."""
        self._commit_seq = max(self._commit_seq, floor)

    def spool_position(self) -> int:
        """The last spool record whose spans are in the store (0: none yet)."""
        return int(self._con.execute(_SPOOL_POSITION).fetchall()[0][0])

    def mark_spool_position(self, spool_seq: int) -> None:
        """Record that every spool record up to ``spool_seq`` is loaded, alone (nothing else to commit)."""
        if self.damaged is not None:
            raise self.damaged
        self._revive()
        try:
            self._con.execute(_MARK_SPOOL, [spool_seq])
        except duckdb.Error as e:
            self._note_damage(e)
            raise

    def _insert(self, spans: pa.Table, scores: pa.Table, resources: pa.Table, spool_seq: int | None) -> None:
        con = self._con
        self._commit_seq += 1
        # The connection's begin/commit methods, not BEGIN/COMMIT statements: nothing to parse and plan on the
        # ack path. Only the batches registered are unregistered (each call costs about 0.15 ms).
        registered: list[str] = []
        try:
            con.begin()
            try:
                con.register("span_batch", _one_chunk(spans))
                registered.append("span_batch")
                con.execute(_INSERT_SPANS, [time.time_ns(), self._commit_seq])
                if resources.num_rows:
                    con.register("resource_batch", resources)
                    registered.append("resource_batch")
                    con.execute(_INSERT_RESOURCES)
                if scores.num_rows:
                    con.register("score_batch", _one_chunk(scores))
                    registered.append("score_batch")
                    con.execute(_INSERT_SCORES, [self._commit_seq])
                if spool_seq is not None:
                    con.execute(_MARK_SPOOL, [spool_seq])
                con.commit()
            except BaseException:
                _rollback(con)
                raise
            finally:
                for name in registered:
                    con.unregister(name)
        except duckdb.Error as e:
            self._note_damage(e)
            raise
        self._fold.committed(spans.num_rows or scores.num_rows)

    @property
    def compaction_due(self) -> bool:
        """Whether a duplicate may have got past the filter since the last ``compact``."""
        return not self._recent.complete or self._recent.unsure

    def compact(self) -> int:
        """Remove the later copies of spans committed since the last check; return how many spans went.

        While the filter holds every key ever stored, nothing can have got past it: only the check's mark moves."""
        if self.damaged is not None or self.disk_full is not None:
            return 0
        try:
            if not self.compaction_due:
                store_compaction.mark_checked(self._con)
                return 0
            with self._fold.lock:  # the kept runs are made again if a copy went: not while a fold writes them
                removed = store_compaction.compact(self._con, _REFOLD)
            self._recent.unsure = False  # only once done: a failed run must be retried, not marked checked
            return removed
        except duckdb.Error as e:
            self._note_damage(e)
            raise

    def prune(self, cutoff_ns: int, shipped: int) -> int:
        """Remove the traces ended before ``cutoff_ns`` whose rows the lake holds (local_window.py)."""
        if self.damaged is not None or self.disk_full is not None:
            return 0
        try:
            with self._fold.lock:  # the kept runs are made again: not while a fold writes them
                return local_window.prune(self._con, cutoff_ns, shipped, _REFOLD)
        except duckdb.Error as e:
            self._note_damage(e)
            raise

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor on the same database: sees committed data, safe to use from another thread."""
        return self._cursor()

    def checkpoint(self, wait: bool = False) -> bool:
        """Fold the WAL into the file; returns whether it ran (False: skipped, try again later).

        ``wait``: wait for a fold in progress rather than skip (the spool needs the room the checkpoint frees)."""
        if self.damaged is not None:
            return False  # nothing to fold in: DuckDB refuses every statement on an invalidated database
        if self.disk_full is not None:
            return False  # it would find no room either (and invalidate the database): the WAL keeps everything
        self._revive()
        # DuckDB refuses a CHECKPOINT while the fold's transaction is open. The writer checkpoints when
        # idle, as the fold runs: rather than keep the next commit waiting behind a fold, skip this one
        # (the WAL keeps everything; the next idle moment, or closing the database, checkpoints).
        if not self._fold.lock.acquire(blocking=wait):
            return False
        try:
            self._con.execute("CHECKPOINT")
        except duckdb.Error as e:
            # A checkpoint refused memory can leave the database invalidated without saying so in its own error.
            self._invalidated = self._invalidated or store_damage.is_out_of_memory(e)
            self._note_damage(e)
            raise
        finally:
            self._fold.lock.release()
        return True

    def fold(self) -> int:
        """Fold everything committed now; returns the spans folded."""
        return self._fold.fold_now()

    def fold_stats(self) -> FoldStats:
        return self._fold.stats()

    def recover(self) -> bool:
        """After a full disk: True once the store takes writes again (``disk_full`` is cleared).

        Tries nothing until the file system has ``RESUME_FREE_BYTES`` free. Opens the database again when
        DuckDB invalidated it (or it answers nothing): that replays the WAL, losing nothing committed."""
        if self.disk_full is None:
            return True
        if self.damaged is not None or store_damage.free_bytes(self.path) < RESUME_FREE_BYTES:
            return False
        try:
            if self._invalidated or not self._usable():
                self._reopen()
        except (duckdb.Error, ObserveError) as e:
            logger.warning("the store could not be opened again yet: %s", e)
            return False
        self.disk_full = None
        return True

    def _revive(self) -> None:
        """Open the database again after memory was refused (a full disk waits for ``recover``), replaying the WAL;
        MemoryError (retryable) while it cannot be opened yet."""
        if not self._invalidated or self.disk_full is not None or self.damaged is not None:
            return
        try:
            self._reopen()
        except (duckdb.Error, ObserveError) as e:
            raise MemoryError(f"the store could not be opened again yet: {e}") from e

    def _usable(self) -> bool:
        try:
            self._con.execute(_SPOOL_POSITION).fetchall()  # a table: an invalidated database answers SELECT 1
        except duckdb.Error:
            return False
        return True

    def _reopen(self) -> None:
        """Close the invalidated database and open the file again (readers' cursors close with it)."""
        self._fold.stop()
        try:
            self._con.close()
        except duckdb.Error:
            pass  # deliberate: closing an invalidated database can fail; the new connection is what counts
        self._invalidated = True  # until the new connection is up: a failed open leaves none usable
        self._con = self._open()
        lock_configuration(self._con)
        self._invalidated = False
        self._fold = RunsFold(self._cursor())
        if self._fold_thread:
            self._fold.start(self._fold_nice)

    def _open(self) -> duckdb.DuckDBPyConnection:
        """The writer's connection, opened from a thread at the background priority: the database's worker
        threads start with it and keep that priority."""
        return cpu_priority.in_lowered_thread(self._nice, lambda: _connect_writer(self.path, self._config))

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the store: a cursor starts on the instance's in-memory catalog, so it is moved
        to the store's."""
        cursor = self._con.cursor()
        cursor.execute(f"USE {self._catalog}")
        return cursor

    def close(self) -> None:
        self._fold.stop()
        if self.damaged is None and not self._invalidated:
            try:
                self._fold.fold_now()
            except duckdb.Error:
                # deliberate: the next open folds what this one could not; the spans are committed
                logger.exception("folding the kept runs at close failed")
        try:
            self._con.close()
        except duckdb.Error:
            if self.damaged is None and not self._invalidated:
                raise
            # Closing an invalidated database can fail again; the damage (or full disk) is already reported.

    def _note_damage(self, error: duckdb.Error) -> None:
        """On a corruption-class error: remember it, tell ``on_damage``, raise it coded. On a full disk:
        remember that (and whether DuckDB invalidated the database), raise StoreDiskFull."""
        if store_damage.is_disk_full(error):
            # A checkpoint that found no room invalidates the database with an I/O error that says so, not a fatal one.
            self._invalidated = (self._invalidated or isinstance(error, duckdb.FatalException)
                                 or "invalidated" in str(error))
            self.disk_full = store_damage.disk_full(self.path, error)
            raise self.disk_full from error
        if store_damage.is_out_of_memory(error):
            # Not damage. DuckDB invalidates the database when it cannot allocate at a commit or checkpoint (a fatal
            # or I/O error saying so): the next statement opens it again (``_revive``). A plain refusal does not.
            plain = isinstance(error, duckdb.OutOfMemoryException) and "invalidated" not in str(error)
            self._invalidated = self._invalidated or not plain
            return
        if not store_damage.is_corruption(error):
            return
        self.damaged = store_damage.corrupt(self.path, error)
        if self._on_damage is not None:
            self._on_damage(self.damaged)
        raise self.damaged from error


def lock_configuration(con: duckdb.DuckDBPyConnection) -> None:
    """Freeze every setting of the database instance, for all its connections, from now on.

    The SQL API shares this instance: without the lock a SELECT could call ``enable_logging``
    (file logging aborts the process on its next query) or ``enable_profiling``. Call it after the
    owner's own settings are in place; the writer's inserts and CHECKPOINTs change no setting.
    """
    con.execute("SET lock_configuration = true")


def open_read_only(path: Path) -> duckdb.DuckDBPyConnection:
    """Open a store file no daemon is writing, read-only, with the SQL API's restrictions."""
    if not path.exists():
        raise StoreMissing(f"no store at {path}")
    store_damage.refuse_other_kinds(path)
    try:
        con = duckdb.connect(str(path), read_only=True, config=dict(_CONFIG))
    except duckdb.Error as e:
        raise store_damage.open_error(path, e) from None
    try:
        schema.check_readable(con)
    except duckdb.Error as e:
        con.close()
        raise store_damage.open_error(path, e) from None
    except BaseException:
        con.close()
        raise
    return con


def _connect_writer(path: Path, config: dict[str, str | bool]) -> duckdb.DuckDBPyConnection:
    """The writer's connection: the store file attached, with ``ROW_GROUP_ROWS``, to an in-memory instance whose
    settings are ``config``. Files are closed to SQL only once the store is attached."""
    store_damage.refuse_other_kinds(path)
    settings = {name: value for name, value in config.items() if name != "enable_external_access"}
    # An in-memory instance spills to ``.tmp`` in the working directory, and DuckDB lets SQL read its temporary
    # directory even with external access off: ``SELECT * FROM '.tmp/x.csv'`` read a user's file there. The
    # store's own (``<store>.tmp``, what DuckDB gives a file database) holds nothing but the store's spills.
    settings.setdefault("temp_directory", temp_directory(path))
    con = duckdb.connect(":memory:", config=settings)
    try:
        catalog = _catalog(path)
        literal = str(path).replace("'", "''")
        con.execute(f"ATTACH '{literal}' AS {catalog} (ROW_GROUP_SIZE {ROW_GROUP_ROWS})")
        con.execute(f"USE {catalog}")
        if config.get("enable_external_access") is False:
            con.execute("SET enable_external_access = false")
    except duckdb.Error as e:
        con.close()
        raise store_damage.open_error(path, e) from None
    return con


def temp_directory(path: Path) -> str:
    """Where DuckDB spills for the store at ``path``: beside it, as for a file database."""
    return str(path.with_name(path.name + ".tmp"))


def _catalog(path: Path) -> str:
    """The store's catalog name, quoted: the file's stem, as ``duckdb.connect`` names it."""
    name = path.stem if path.stem.lower() not in _RESERVED_CATALOGS else _FALLBACK_CATALOG
    return '"' + name.replace('"', '""') + '"'


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass  # deliberate: the commit's own error is the one to report; an invalidated database refuses this too


def _table(columns: dict[str, list], table_schema: pa.Schema, consume: bool) -> pa.Table:
    arrays = []
    for name in table_schema.names:
        arrays.append(pa.array(columns[name], table_schema.field(name).type))
        if consume:
            columns[name].clear()  # each list freed once its column is in Arrow: the lists never all coexist
    return pa.Table.from_arrays(arrays, schema=table_schema)


def _concat(tables: list[pa.Table], table_schema: pa.Schema) -> pa.Table:
    if not tables:
        return table_schema.empty_table()
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)  # zero-copy: one chunk per request


def _one_chunk(table: pa.Table) -> pa.Table:
    """``table`` as one Arrow chunk, for an INSERT. DuckDB inserts a table of many chunks (one per request) as many
    ordered batches, each written apart on its own thread and merged after: 10.3-10.6 µs of CPU a span for the
    ingest benchmark's runs of one span, against 7.0-7.5 from one chunk, the copy included (6.2-6.3 against 3.5 for
    its traces; benchmarks/perf/append.py --fold-each). On a busy machine the CPU is what limits the loader."""
    return table if table.num_columns == 0 or table.column(0).num_chunks <= 1 else table.combine_chunks()


def _keys(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    return (table.column("key_hi").to_numpy().astype(np.uint64, copy=False),
            table.column("key_lo").to_numpy().astype(np.uint64, copy=False))
