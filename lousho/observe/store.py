"""The DuckDB span store: one read-write connection that appends, cursors that read.

Only the daemon opens the file read-write (DuckDB allows one writing process); everything else
reads through the daemon's SQL API or opens the file read-only (``open_read_only``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from lousho.observe import schema
from lousho.observe.errors import StoreMissing
from lousho.observe.otlp_decode import SCORE_FIELDS, SPAN_FIELDS, Decoded

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
_INSERT_SPANS = (
    f"INSERT OR IGNORE INTO spans (span_key, {', '.join(_SPAN_COLUMNS)}, duration_ns, received_ns) "
    f"SELECT {_KEY}, {', '.join(_SPAN_COLUMNS)}, end_ns - start_ns, ? FROM span_batch"
)
_SCORE_COLUMNS = [f for f in SCORE_FIELDS if f not in ("key_hi", "key_lo")]
_INSERT_SCORES = (
    f"INSERT OR IGNORE INTO scores (span_key, {', '.join(_SCORE_COLUMNS)}) "
    f"SELECT {_KEY}, {', '.join(_SCORE_COLUMNS)} FROM score_batch"
)


@dataclass(frozen=True)
class AppendResult:
    inserted: int
    duplicates: int


class SpanStore:
    """The read-write store. Not thread-safe for writes: one writer thread owns ``append``."""

    def __init__(self, path: Path, *, memory_limit: str | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        config = dict(_WRITER_CONFIG)
        if memory_limit:
            config["memory_limit"] = memory_limit
        self.path = path
        self._con = duckdb.connect(str(path), config=config)
        try:
            schema.migrate(self._con)
        except BaseException:
            self._con.close()
            raise

    def append(self, batches: list[Decoded]) -> AppendResult:
        """Insert the spans and scores of ``batches`` in one transaction; duplicates are ignored."""
        spans = _table(batches, "spans", SPAN_SCHEMA)
        scores = _table(batches, "scores", SCORE_SCHEMA)
        con = self._con
        con.execute("BEGIN")
        try:
            con.register("span_batch", spans)
            inserted = _count(con.execute(_INSERT_SPANS, [time.time_ns()]).fetchall())
            if scores.num_rows:
                con.register("score_batch", scores)
                con.execute(_INSERT_SCORES)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        finally:
            con.unregister("span_batch")
            con.unregister("score_batch")
        return AppendResult(inserted=inserted, duplicates=spans.num_rows - inserted)

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor on the same database: sees committed data, safe to use from another thread."""
        return self._con.cursor()

    def checkpoint(self) -> None:
        self._con.execute("CHECKPOINT")

    def close(self) -> None:
        self._con.close()


def open_read_only(path: Path) -> duckdb.DuckDBPyConnection:
    """Open a store file no daemon is writing, read-only, with the SQL API's restrictions."""
    if not path.exists():
        raise StoreMissing(f"no store at {path}")
    con = duckdb.connect(str(path), read_only=True, config=dict(_CONFIG))
    try:
        schema.check_readable(con)
    except BaseException:
        con.close()
        raise
    return con


def _table(batches: list[Decoded], part: str, table_schema: pa.Schema) -> pa.Table:
    columns: dict[str, list] = {name: [] for name in table_schema.names}
    for batch in batches:
        source = getattr(batch, part)
        for name, values in columns.items():
            values.extend(source[name])
    return pa.table(columns, schema=table_schema)


def _count(rows: list[tuple]) -> int:
    return int(rows[0][0]) if rows else 0
