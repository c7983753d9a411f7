"""Read-only SQL over the store: one SELECT, no writes, no settings, no files, a time limit, a row cap.

Fences, each enough against a different mistake:

- ``sql_guard.check_read_only`` reads the parse tree: one SELECT, no data-modifying query inside it,
  only reading table functions, no scalar with side effects;
- the query runs in a ``READ ONLY`` transaction, so the engine itself refuses any write;
- the database's configuration is locked once the store is open (``store.SpanStore``, and
  ``client.FileClient`` for a file), so nothing can turn logging, profiling or settings on;
- external access is disabled on the instance (``read_csv('/etc/passwd')`` fails inside a SELECT),
  and a file opened without the daemon is opened read-only.

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

from lousho.observe.errors import SqlFailed, SqlRefused
from lousho.observe.sql_guard import check_read_only, first_line

__all__ = ["QueryResult", "check_read_only", "run_query"]

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
) -> QueryResult:
    """Run a checked query on ``con`` (a cursor of its own), interrupting it after ``timeout``.

    ``con`` must have no open transaction; the query runs in a read-only one, rolled back after.
    """
    check_read_only(query)
    if params is not None and not isinstance(params, list | tuple):
        raise SqlRefused("params must be a list")
    timer = threading.Timer(timeout, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        con.execute("BEGIN TRANSACTION READ ONLY")
        try:
            return _fetch(con, query, params, max_rows)
        finally:
            _rollback(con)
    except duckdb.InterruptException:
        raise SqlFailed(
            f"the query ran past the {timeout:g} s limit and was stopped",
            hint="narrow the query (a WHERE on start_ns or run_id, a LIMIT)",
        ) from None
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


def _fetch(con: duckdb.DuckDBPyConnection, query: str, params: list[Any] | None, max_rows: int) -> QueryResult:
    relation = con.sql(query, params=list(params) if params else None)
    if relation is None:
        raise SqlRefused("the statement returns no rows")
    relation = _faithful(relation)
    reader = relation.to_arrow_reader(batch_size=65_536)
    batches: list[pa.RecordBatch] = []
    rows = 0
    truncated = False
    for batch in reader:
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
