"""Read-only SQL over the lake, behind the same fences as the local SQL API.

The statement guard (``sql_guard.check_read_only``: one side-effect-free SELECT) and the size bound run here,
on lousho's DuckDB, before the text reaches the lake's process; there the lake is attached read-only, files and
network outside the lake's data directory are shut off and the configuration is locked (lake_worker.py).
"""

from __future__ import annotations

import threading
from typing import Any

from lousho.observe.errors import LakeFailed, SqlFailed, SqlRefused
from lousho.observe.lake.lake_client import LakeClient, LakeTarget
from lousho.observe.sql.query import QueryResult, check_size
from lousho.observe.sql.sql_guard import check_read_only


def run_lake_query(client: LakeClient, query: str, params: list[Any] | None = None, *, timeout: float = 30.0,
                   max_rows: int = 1_000_000, max_query_bytes: int = 1024 * 1024) -> QueryResult:
    check_size(query, max_query_bytes)
    if params is not None and not isinstance(params, list | tuple):
        raise SqlRefused("params must be a list")
    check_read_only(query)
    try:
        table, truncated = client.query(query, list(params) if params else None, timeout_s=timeout,
                                        max_rows=max_rows)
    except LakeFailed as e:
        message = e.message.removeprefix("the lake refused the request: ")
        if "Permission Error" in message or "read-only" in message:
            raise SqlRefused(f"refused: {message.splitlines()[0]}") from None
        raise SqlFailed(f"the lake: {message.splitlines()[0]}") from None
    return QueryResult(table, truncated)


class LakeReader:
    """The daemon's read-only lake process for ``/v1/sql?scope=lake``, started on first use and started again
    after it stops; one query at a time."""

    def __init__(self, target: LakeTarget, python: str | None = None) -> None:
        self.target, self._python = target, python
        self._client: LakeClient | None = None
        self._lock = threading.Lock()

    def run(self, query: str, params: list[Any] | None, **bounds: Any) -> QueryResult:
        with self._lock:
            if self._client is None:
                self._client = LakeClient(self.target, read_only=True, python=self._python)
            try:
                return run_lake_query(self._client, query, params, **bounds)
            except BaseException as e:
                if not isinstance(e, SqlFailed | SqlRefused):
                    self._client.close()
                    self._client = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
