"""Read-only SQL over the lake, behind the same fences as the local SQL API.

The statement guard (``sql_guard.check_lake_read_only``: one side-effect-free SELECT, no function of the lake's
extensions, no database but the lake) and the size bound run here, on lousho's DuckDB, before the text reaches the
lake's process; there the lake is attached read-only, files and network outside the lake's data directory are shut
off and the configuration is locked (lake_worker.py). A query is bounded in time (its process is killed past its
limit, ``LakeClient``) and in answer bytes, as a local one is.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from lousho.observe.errors import LakeFailed, SqlFailed, SqlOutOfMemory, SqlRefused
from lousho.observe.lake.lake_client import LakeClient, LakeTarget
from lousho.observe.sql.query import QueryResult, check_size
from lousho.observe.sql.sql_guard import check_lake_read_only

logger = logging.getLogger(__name__)

# A query of the lake may take longer than one of the local store: ``runs`` and ``sessions`` are computed from every
# span there (about 10 s at 10M spans, docs/performance.md "The fleet's lake"), where the store keeps them folded.
LAKE_SQL_TIMEOUT_S = 120.0
# DuckDB's memory limit in each read-only lake process (its default is 80% of the machine's memory, per process).
LAKE_QUERY_MEMORY_LIMIT = "4GB"


def run_lake_query(client: LakeClient, query: str, params: list[Any] | None = None, *,
                   timeout: float = LAKE_SQL_TIMEOUT_S,
                   max_rows: int = 1_000_000, max_query_bytes: int = 1024 * 1024,
                   max_answer_bytes: int | None = None) -> QueryResult:
    """``run_query``'s fences and bounds, for the lake: ``max_answer_bytes`` bounds the Arrow answer as
    ``--sql-query-memory`` bounds a local one (``LOUSHO_SQL_OUT_OF_MEMORY``), counted in the lake's process."""
    check_size(query, max_query_bytes)
    if params is not None and not isinstance(params, list | tuple):
        raise SqlRefused("params must be a list")
    # Checked against the lake's own DuckDB too: its extensions add functions (postgres_query, ...) this DuckDB
    # does not know, and its metadata catalog is attached beside the lake.
    check_lake_read_only(query, *client.fence())
    try:
        table, truncated = client.query(query, list(params) if params else None, timeout_s=timeout,
                                        max_rows=max_rows, max_bytes=max_answer_bytes)
    except LakeFailed as e:
        message = e.message.removeprefix("the lake refused the request: ")
        if getattr(e, "kind", None) in ("AnswerTooLarge", "OutOfMemoryException"):
            raise SqlOutOfMemory(f"the lake: {message.splitlines()[0]}") from None
        if "Permission Error" in message or "read-only" in message:
            raise SqlRefused(f"refused: {message.splitlines()[0]}") from None
        raise SqlFailed(f"the lake: {message.splitlines()[0]}") from None
    return QueryResult(table, truncated)


class LakeReader:
    """Read-only lake processes for queries (``/v1/sql?scope=lake``, the trigger, the page): started on first use,
    up to ``processes`` at once (each query holds one), and started again after one stops."""

    def __init__(self, target: LakeTarget, python: str | None = None, processes: int = 2,
                 memory_limit: str = LAKE_QUERY_MEMORY_LIMIT) -> None:
        self.target, self._python, self._memory_limit = target, python, memory_limit
        self._idle: list[LakeClient] = []
        self._slots = threading.BoundedSemaphore(processes)
        self._lock = threading.Lock()
        self._closed = False

    def run(self, query: str, params: list[Any] | None, **bounds: Any) -> QueryResult:
        """The query's answer; its time limit (``timeout``) bounds the whole call, a new process's start
        included: a process that does not answer in it is killed (``LakeUnavailable``) and the next query
        starts another. A process whose database an internal error of DuckDB's invalidated is never used again
        (every later query of it would fail), and the query is tried once more on a new one: such an error came
        and went from one run of the same query to the next."""
        timeout = float(bounds.pop("timeout", LAKE_SQL_TIMEOUT_S))
        with self._slots:
            started = time.monotonic()
            for attempt in (1, 2):
                client = self._take(max(0.1, timeout - (time.monotonic() - started)))
                try:
                    remaining = max(0.1, timeout - (time.monotonic() - started))
                    result = run_lake_query(client, query, params, timeout=remaining, **bounds)
                except BaseException as e:
                    if isinstance(e, SqlFailed | SqlRefused | SqlOutOfMemory):
                        self._give_back(client)  # closed instead when broken (``usable``)
                    else:
                        client.close()
                    if attempt == 1 and client.broken and time.monotonic() - started < timeout:
                        logger.warning("a lake query process stopped answering (%s); asking a new one", e)
                        continue
                    raise
                self._give_back(client)
                return result
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _take(self, timeout: float) -> LakeClient:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return LakeClient(self.target, read_only=True, python=self._python, open_timeout_s=timeout,
                          memory_limit=self._memory_limit)

    def _give_back(self, client: LakeClient) -> None:
        with self._lock:
            if not self._closed and client.usable:
                self._idle.append(client)
                return
        client.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for client in idle:
            client.close()
