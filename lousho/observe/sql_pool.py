"""The SQL API's own bounded executor, so slow queries never hold threads that ingest needs.

OTLP decoding runs on Starlette's shared thread pool (``run_in_threadpool``, 40 threads). Queries
used to run there too: forty slow ones and an export waited seconds for a thread. Here queries get
``workers`` threads of their own and at most ``queue`` more wait; past that a request is refused at
once with ``SqlBusy`` (HTTP 503 + Retry-After), so a flood of SQL costs ingest nothing but the
event loop's few microseconds per refusal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lousho.observe.errors import SqlBusy

T = TypeVar("T")


class SqlPool:
    """``run`` is called from the event loop only (the admission count needs no lock)."""

    def __init__(self, workers: int, queue: int) -> None:
        self.workers = workers
        self.capacity = workers + queue
        self._in_flight = 0
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lousho-sql")

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a SQL worker; raises SqlBusy at once when every worker and queue slot is taken."""
        if self._in_flight >= self.capacity:
            raise SqlBusy(f"all {self.workers} SQL workers are busy and {self.capacity - self.workers} "
                          "queries are already waiting")
        self._in_flight += 1
        try:
            return await asyncio.wrap_future(self._executor.submit(fn))
        finally:
            self._in_flight -= 1
