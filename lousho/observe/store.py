"""The DuckDB span store: one read-write connection that appends, cursors that read.

Only the daemon opens the file read-write (DuckDB allows one writing process); everything else
reads through the daemon's SQL API or opens the file read-only (``open_read_only``). Every failure to
open is a coded error (``store_damage.open_error``); the daemon also reads every table once at start
and refuses a damaged store (``LOUSHO_STORE_CORRUPT``) rather than serving it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from lousho.observe import schema, store_damage
from lousho.observe.errors import StoreCorrupt, StoreMissing, StoreUnwritable
from lousho.observe.otlp_decode import SCORE_FIELDS, SPAN_FIELDS, Decoded
from lousho.observe.runs_fold import RunsFold

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

_SPAN_TYPES: dict[str, pa.DataType] = {
    "key_hi": pa.uint64(),
    "key_lo": pa.uint64(),
    "start_ns": pa.int64(),
    "end_ns": pa.int64(),
    "input_tokens": pa.int64(),
    "output_tokens": pa.int64(),
    "cost_usd": pa.float64(),
    "probe": pa.bool_(),
    "cache_read_tokens": pa.int64(),
    "cache_creation_tokens": pa.int64(),
    "reasoning_tokens": pa.int64(),
}
_SCORE_TYPES: dict[str, pa.DataType] = {
    "key_hi": pa.uint64(),
    "key_lo": pa.uint64(),
    "seq": pa.int32(),
    "score_value": pa.float64(),
    "passed": pa.bool_(),
    "time_ns": pa.int64(),
}
SPAN_SCHEMA = pa.schema([(f, _SPAN_TYPES.get(f, pa.string())) for f in SPAN_FIELDS])
SCORE_SCHEMA = pa.schema([(f, _SCORE_TYPES.get(f, pa.string())) for f in SCORE_FIELDS])

_KEY = "((key_hi::UHUGEINT << 64) | key_lo::UHUGEINT)"
_SPAN_COLUMNS = [f for f in SPAN_FIELDS if f not in ("key_hi", "key_lo")]
# Parameters: received_ns, then commit_seq (one number per commit, rising: what the kept runs fold by,
# runs_table.py).
_INSERT_SPANS = (
    f"INSERT OR IGNORE INTO spans (span_key, {', '.join(_SPAN_COLUMNS)}, duration_ns, received_ns, commit_seq) "
    f"SELECT {_KEY}, {', '.join(_SPAN_COLUMNS)}, end_ns - start_ns, ?, ? FROM span_batch"
)
_SCORE_COLUMNS = [f for f in SCORE_FIELDS if f not in ("key_hi", "key_lo")]
_INSERT_SCORES = (
    f"INSERT OR IGNORE INTO scores (span_key, {', '.join(_SCORE_COLUMNS)}, commit_seq) "
    f"SELECT {_KEY}, {', '.join(_SCORE_COLUMNS)}, ? FROM score_batch"
)
_LAST_COMMIT_SEQ = ("SELECT greatest((SELECT coalesce(max(commit_seq), 0) FROM spans), "
                    "(SELECT coalesce(max(commit_seq), 0) FROM scores))")


@dataclass(frozen=True)
class AppendResult:
    inserted: int
    duplicates: int


class SpanStore:
    """The read-write store. Not thread-safe for writes: one writer thread owns ``append``.

    Once a commit or checkpoint fails in a way that means the file is damaged, the store is
    ``damaged``: ``on_damage`` is told once, and every later ``append`` raises the same StoreCorrupt
    without touching DuckDB (which has invalidated the database by then).

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
    ) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreUnwritable(f"cannot create the directory {path.parent}: {e.strerror}") from None
        config = dict(_WRITER_CONFIG)
        if memory_limit:
            config["memory_limit"] = memory_limit
        self.path = path
        self.damaged: StoreCorrupt | None = None
        self._on_damage = on_damage
        self._con = _connect(path, read_only=False, config=config)
        try:
            schema.migrate(self._con)
            if verify:
                store_damage.verify_tables(self._con, path)
            lock_configuration(self._con)
            self._commit_seq = int(self._con.execute(_LAST_COMMIT_SEQ).fetchall()[0][0])
            self._fold = RunsFold(self._con.cursor())
            self._fold.fold_now()
            if fold_thread:
                self._fold.start()
        except duckdb.Error as e:
            self._con.close()
            raise store_damage.open_error(path, e) from None
        except BaseException:
            self._con.close()
            raise

    def append(self, batches: list[Decoded]) -> AppendResult:
        """Insert the spans and scores of ``batches`` in one transaction; duplicates are ignored.

        Raises StoreCorrupt once the file is known to be damaged."""
        if self.damaged is not None:
            raise self.damaged
        spans = _table(batches, "spans", SPAN_SCHEMA)
        scores = _table(batches, "scores", SCORE_SCHEMA)
        con = self._con
        self._commit_seq += 1
        try:
            con.execute("BEGIN")
            try:
                con.register("span_batch", spans)
                inserted = _count(con.execute(_INSERT_SPANS, [time.time_ns(), self._commit_seq]).fetchall())
                scored = 0
                if scores.num_rows:
                    con.register("score_batch", scores)
                    scored = _count(con.execute(_INSERT_SCORES, [self._commit_seq]).fetchall())
                con.execute("COMMIT")
            except BaseException:
                _rollback(con)
                raise
            finally:
                con.unregister("span_batch")
                con.unregister("score_batch")
        except duckdb.Error as e:
            self._note_damage(e)
            raise
        self._fold.committed(inserted or scored)
        return AppendResult(inserted=inserted, duplicates=spans.num_rows - inserted)

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor on the same database: sees committed data, safe to use from another thread."""
        return self._con.cursor()

    def checkpoint(self) -> None:
        if self.damaged is not None:
            return  # nothing to fold in: DuckDB refuses every statement on an invalidated database
        # DuckDB refuses a CHECKPOINT while the fold's transaction is open. The writer checkpoints when
        # idle, as the fold runs: rather than keep the next commit waiting behind a fold, skip this one
        # (the WAL keeps everything; the next idle moment, or closing the database, checkpoints).
        if not self._fold.lock.acquire(blocking=False):
            return
        try:
            self._con.execute("CHECKPOINT")
        except duckdb.Error as e:
            self._note_damage(e)
            raise
        finally:
            self._fold.lock.release()

    def fold(self) -> int:
        """Fold everything committed now; returns the spans folded."""
        return self._fold.fold_now()

    def close(self) -> None:
        self._fold.stop()
        if self.damaged is None:
            try:
                self._fold.fold_now()
            except duckdb.Error:
                # deliberate: the next open folds what this one could not; the spans are committed
                logger.exception("folding the kept runs at close failed")
        try:
            self._con.close()
        except duckdb.Error:
            if self.damaged is None:
                raise
            # Closing an invalidated database can fail again; the damage is already reported.

    def _note_damage(self, error: duckdb.Error) -> None:
        """On a corruption-class error: remember it, tell ``on_damage``, raise it coded."""
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
    con = _connect(path, read_only=True, config=dict(_CONFIG))
    try:
        schema.check_readable(con)
    except duckdb.Error as e:
        con.close()
        raise store_damage.open_error(path, e) from None
    except BaseException:
        con.close()
        raise
    return con


def _connect(path: Path, *, read_only: bool, config: dict[str, str | bool]) -> duckdb.DuckDBPyConnection:
    store_damage.refuse_other_kinds(path)
    try:
        return duckdb.connect(str(path), read_only=read_only, config=config)
    except duckdb.Error as e:
        raise store_damage.open_error(path, e) from None


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass  # deliberate: the commit's own error is the one to report; an invalidated database refuses this too


def _table(batches: list[Decoded], part: str, table_schema: pa.Schema) -> pa.Table:
    columns: dict[str, list] = {name: [] for name in table_schema.names}
    for batch in batches:
        source = getattr(batch, part)
        for name, values in columns.items():
            values.extend(source[name])
    return pa.table(columns, schema=table_schema)


def _count(rows: list[tuple]) -> int:
    return int(rows[0][0]) if rows else 0
