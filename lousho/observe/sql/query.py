"""Read-only SQL over the store: one SELECT, no writes, no settings, no files, a time limit, a row cap.

Fences, each enough against a different mistake:

- ``sql_guard.check_read_only`` reads the parse tree: one SELECT, no data-modifying query inside it,
  only reading table functions, no scalar with side effects;
- the query runs in a ``READ ONLY`` transaction, so the engine itself refuses any write;
- the database's configuration is locked once the store is open (``store.SpanStore``, and
  ``client.FileClient`` for a file), so nothing can turn logging, profiling or settings on;
- external access is disabled on the instance (``read_csv('/etc/passwd')`` fails inside a SELECT),
  and a file opened without the daemon is opened read-only.

Bounds, so one query cannot take the daemon with it: the text is refused past ``max_query_bytes`` before
anything parses it (``LOUSHO_SQL_TOO_LARGE``); the check and the query run inside the time limit; the
rows read stop at ``max_answer_bytes`` of Arrow data, and DuckDB's own memory limit turns a query that
needs more into ``LOUSHO_SQL_OUT_OF_MEMORY``. The parse, the check and the query run with the GIL
released (``_seam.submit`` rather than ``con.sql``, whose Python-side preparation of the text holds the
GIL for about 0.4 s per MiB), so ingest never waits behind a long statement.

Results come back as Arrow with one adjustment: a column whose type has no faithful Arrow form in
this DuckDB (HUGEINT and UHUGEINT (UHUGEINT's top half would wrap), BIGNUM, BIT, TIME WITH TIME
ZONE, VARIANT, GEOMETRY, or a nested type holding one) is sent as DuckDB's text for it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

try:  # DuckDB 2.0.1's entry that prepares a statement with the GIL released; private, so optional.
    from duckdb import _seam
except ImportError:  # another DuckDB: the public path, which holds the GIL while it prepares the text
    _seam = None

from lousho.observe.errors import SqlFailed, SqlOutOfMemory, SqlRefused, SqlTimedOut, SqlTooLarge
from lousho.observe.sql.sql_guard import check_read_only, first_line

__all__ = ["QueryResult", "check_read_only", "run_query"]

MIB = 1024 * 1024
# The default bound on a query's text. A MiB of SQL is a long IN list; DuckDB's parser takes about a
# GiB and some seconds for a MiB of the densest text (``1,1,1,...``), which the bound keeps finite.
MAX_QUERY_BYTES = MIB
# A query with a column that must be re-read as text (``_faithful``) and with parameters is rebuilt as a
# relation, whose preparation holds the GIL: it is allowed only for a text this short.
_REBUILT_UP_TO = 32 * 1024

_AS_TEXT = re.compile(r"\b(HUGEINT|UHUGEINT|BIGNUM|VARINT|BIT|TIME WITH TIME ZONE|VARIANT|GEOMETRY)\b")


@dataclass(frozen=True)
class QueryResult:
    table: pa.Table
    truncated: bool


def run_query(
    con: duckdb.DuckDBPyConnection,
    query: str,
    params: list[Any] | None = None,
    *,
    timeout: float = 30.0,
    max_rows: int = 1_000_000,
    max_query_bytes: int = MAX_QUERY_BYTES,
    max_answer_bytes: int | None = None,
) -> QueryResult:
    """Run a checked query on ``con`` (a cursor of its own), interrupting it after ``timeout``.

    ``con`` must have no open transaction; the query runs in a read-only one, rolled back after.
    """
    check_size(query, max_query_bytes)
    if params is not None and not isinstance(params, list | tuple):
        raise SqlRefused("params must be a list")
    # The clock starts before the check: parsing a long statement is part of what the limit bounds.
    timer = threading.Timer(timeout, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        check_read_only(query, con)
        con.execute("BEGIN TRANSACTION READ ONLY")
        try:
            return _fetch(con, query, params, max_rows, max_answer_bytes)
        finally:
            _rollback(con)
    except duckdb.InterruptException:
        raise SqlTimedOut(f"the query ran past the {timeout:g} s limit and was stopped") from None
    except duckdb.OutOfMemoryException as e:
        raise out_of_memory(first_line(e), capped="bad allocation" in str(e)) from None
    except MemoryError as e:
        # Python's side of the answer (Arrow, its text) met the daemon's memory cap.
        raise out_of_memory(str(e) or type(e).__name__, capped=True) from None
    except (duckdb.PermissionException, duckdb.TransactionException) as e:
        # TransactionException: the read-only transaction refused a write the guard let through.
        raise SqlRefused(f"refused: {first_line(e)}") from None
    except duckdb.Error as e:
        if "configuration has been locked" in str(e):
            # The locked configuration refused a setting the guard let through.
            raise SqlRefused(f"refused: {first_line(e)}") from None
        raise SqlFailed(first_line(e)) from None
    finally:
        timer.cancel()


def out_of_memory(message: str, *, capped: bool) -> SqlOutOfMemory:
    """``capped``: the allocator refused (the process met its memory cap, memory_cap.py) rather than DuckDB's
    count of its working memory: one value the query builds, not how much it reads."""
    if not capped:
        return SqlOutOfMemory(f"the query needed more memory than the daemon allows: {message}")
    return SqlOutOfMemory(f"the query built a value past the daemon's memory cap: {message}",
                          hint="build smaller values (a LIMIT inside a list or string function, fewer repeats); "
                               "the daemon's --memory-cap sets the bound")


def check_size(query: object, max_query_bytes: int) -> None:
    """Refuse a text over the bound before anything parses it (a character is at most 4 UTF-8 bytes)."""
    if isinstance(query, str) and len(query) > max_query_bytes // 4 and len(query.encode()) > max_query_bytes:
        raise SqlTooLarge(f"the query is {len(query.encode())} bytes, over the {max_query_bytes} byte bound")


def _fetch(
    con: duckdb.DuckDBPyConnection, query: str, params: list[Any] | None, max_rows: int, max_bytes: int | None,
) -> QueryResult:
    values = list(params) if params else None
    if _seam is None:
        relation = con.sql(query, params=values)
        description = relation.description if relation is not None else None
        close, arrow_reader = (lambda: None), (lambda: relation.to_arrow_reader(65_536))
    else:
        result = _seam.submit(con, query, values, "stream", 65_536)
        description, close, arrow_reader = result.description, result.close, result.arrow_reader
    types = [str(d[1]) for d in description or ()]
    if not description:
        close()
        raise SqlRefused("the statement returns no rows")
    needs_text = [bool(_AS_TEXT.search(t)) for t in types]
    if not any(needs_text):
        reader = arrow_reader()
    elif _seam is not None and all(t == "HUGEINT" for t in types if _AS_TEXT.search(t)):
        # The common case, a sum of integers: its Arrow form (decimal128 over the same 128 bits, the least HUGEINT
        # too) reads back as DuckDB's own text for it, so the rows already computed are read, not computed again.
        reader = _HugeintsAsText(arrow_reader(), needs_text)
    else:
        close()
        reader = _faithful_reader(con, query, values)
    try:
        return _read(reader, max_rows, max_bytes)
    finally:
        reader.close()


class _HugeintsAsText:
    """The batches of ``reader`` with the columns ``as_text`` marks (HUGEINT, as decimal128) turned to text."""

    def __init__(self, reader: Any, as_text: list[bool]) -> None:
        self._reader, self._as_text = reader, as_text
        fields = [f.with_type(pa.string()) if text else f for f, text in zip(reader.schema, as_text, strict=True)]
        self.schema = pa.schema(fields, metadata=reader.schema.metadata)

    def __iter__(self) -> Any:
        for batch in self._reader:
            columns = [c.cast(pa.string()) if text else c for c, text in zip(batch.columns, self._as_text, strict=True)]
            yield pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def close(self) -> None:
        self._reader.close()


def _faithful_reader(con: duckdb.DuckDBPyConnection, query: str, values: list[Any] | None) -> Any:
    if values and len(query) > _REBUILT_UP_TO:
        raise SqlRefused(f"a result column needs a text form, and with params the query must then be at most "
                         f"{_REBUILT_UP_TO} characters", hint="cast the column in the query, e.g. col::VARCHAR")
    relation = con.sql(query, params=values)
    assert relation is not None
    return _faithful(relation).to_arrow_reader(batch_size=65_536)


def _read(reader: Any, max_rows: int, max_bytes: int | None) -> QueryResult:
    batches: list[pa.RecordBatch] = []
    rows = 0
    nbytes = 0
    truncated = False
    for batch in reader:
        nbytes += batch.nbytes
        if max_bytes is not None and nbytes > max_bytes:
            del batches
            raise SqlOutOfMemory(f"the answer passed the {max_bytes // MIB} MiB one query may hold")
        if rows + batch.num_rows > max_rows:
            batches.append(batch.slice(0, max_rows - rows))
            truncated = True
            break
        batches.append(batch)
        rows += batch.num_rows
    return QueryResult(table=pa.Table.from_batches(batches, schema=reader.schema), truncated=truncated)


def _faithful(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """The same result, with the columns Arrow would carry wrongly (or not at all) as text.

    Columns are picked by position (``#n``) and renamed back, so duplicate names survive.
    """
    types = [str(t) for t in relation.types]
    if not any(_AS_TEXT.search(t) for t in types):
        return relation
    exprs = []
    for i, (name, type_name) in enumerate(zip(relation.columns, types, strict=True), start=1):
        alias = '"' + name.replace('"', '""') + '"'
        exprs.append(f"CAST(#{i} AS VARCHAR) AS {alias}" if _AS_TEXT.search(type_name) else f"#{i} AS {alias}")
    return relation.query("lousho_result", f"SELECT {', '.join(exprs)} FROM lousho_result")


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.TransactionException:
        # An interrupted or failed statement already ended the transaction: nothing to roll back.
        pass
