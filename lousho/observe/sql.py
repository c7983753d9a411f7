"""Read-only SQL over the store: one SELECT, no files, no network, a time limit, a row cap.

Three fences, each enough against a different mistake: the statement must parse as a single SELECT
(so INSERT, COPY, ATTACH, INSTALL/LOAD, SET, PRAGMA and CALL never run); the database instance has
external access disabled (so ``read_csv('/etc/passwd')`` inside a SELECT fails); and a file opened
without the daemon is opened read-only.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from lousho.observe.errors import SqlFailed, SqlRefused

_ALLOWED = {duckdb.StatementType.SELECT}


@dataclass(frozen=True)
class QueryResult:
    table: pa.Table
    truncated: bool


def check_read_only(query: str) -> None:
    """Refuse anything but exactly one SELECT statement, before it reaches the engine."""
    if not isinstance(query, str) or not query.strip():
        raise SqlRefused("the query is empty")
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise SqlFailed(f"the query does not parse: {_first_line(e)}") from None
    if len(statements) != 1:
        raise SqlRefused(f"one statement per request, got {len(statements)}")
    kind = statements[0].type
    if kind not in _ALLOWED:
        name = getattr(kind, "name", str(kind))
        raise SqlRefused(f"{name} statements are refused: the SQL API is read-only")


def run_query(
    con: duckdb.DuckDBPyConnection,
    query: str,
    params: list[Any] | None = None,
    *,
    timeout: float = 30.0,
    max_rows: int = 1_000_000,
) -> QueryResult:
    """Run a checked query on ``con`` (a cursor of its own), interrupting it after ``timeout``."""
    check_read_only(query)
    if params is not None and not isinstance(params, list | tuple):
        raise SqlRefused("params must be a list")
    timer = threading.Timer(timeout, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        relation = con.sql(query, params=list(params) if params else None)
        if relation is None:
            raise SqlRefused("the statement returns no rows")
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
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException:
        raise SqlFailed(
            f"the query ran past the {timeout:g} s limit and was stopped",
            hint="narrow the query (a WHERE on start_ns or run_id, a LIMIT)",
        ) from None
    except duckdb.PermissionException as e:
        raise SqlRefused(f"refused: {_first_line(e)}") from None
    except duckdb.Error as e:
        raise SqlFailed(_first_line(e)) from None
    finally:
        timer.cancel()
    return QueryResult(table=table, truncated=truncated)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
