"""The SQL API's own bounded executor, so slow queries never hold threads that ingest needs.

OTLP decoding runs on Starlette's shared thread pool (``run_in_threadpool``, 40 threads). Queries
used to run there too: forty slow ones and an export waited seconds for a thread. Here queries get
``workers`` threads of their own and at most ``queue`` more wait; past that a request is refused at
once with ``SqlBusy`` (HTTP 503 + Retry-After), so a flood of SQL costs ingest nothing but the
event loop's few microseconds per refusal.

A slot is held from admission until the answer has been sent (``Ticket.release``), not only while the
query runs: an answer a client never reads stays counted here (``pending_bytes``) until the send timeout
cuts that client off, so unread answers can pin at most ``capacity`` answers of the per-query bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lousho.kernel import cpu_priority
from lousho.observe.errors import SqlBusy

T = TypeVar("T")


class Ticket:
    """One admitted query: its slot, and the bytes of its answer while they wait to be sent."""

    def __init__(self, pool: SqlPool) -> None:
        self._pool = pool
        self._bytes = 0
        self._released = False

    def hold(self, nbytes: int) -> None:
        self._pool.pending_bytes += nbytes - self._bytes
        self._bytes = nbytes

    def release(self) -> None:
        """Give the slot and the answer's bytes back; idempotent."""
        if self._released:
            return
        self._released = True
        self._pool.pending_bytes -= self._bytes
        self._bytes = 0
        self._pool.in_flight -= 1


class SqlPool:
    """Every method is called from the event loop only (the counts need no lock)."""

    def __init__(self, workers: int, queue: int) -> None:
        self.workers = workers
        self.capacity = workers + queue
        self.in_flight = 0
        self.pending_bytes = 0
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lousho-sql",
                                            initializer=_yield_to_ingest)

    def admit(self) -> Ticket:
        """A slot for one query; raises SqlBusy at once when every worker and queue slot is taken."""
        if self.in_flight >= self.capacity:
            raise SqlBusy(f"all {self.workers} SQL workers are busy and {self.capacity - self.workers} "
                          "queries or unsent answers are already waiting")
        self.in_flight += 1
        return Ticket(self)

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a SQL worker, for a query already admitted."""
        return await asyncio.wrap_future(self._executor.submit(fn))


def _yield_to_ingest() -> None:
    """Lower this SQL worker's CPU priority (Linux: per thread): DuckDB parses a long statement on the
    calling thread, seconds of CPU that exports on a busy machine should not queue behind."""
    cpu_priority.lower_this_thread(cpu_priority.BACKGROUND_NICE)
