"""When the kept runs are folded (runs_table.fold): on a thread of its own, never on the ack path.

The writer's commits only append spans; the store tells this thread how many each commit inserted
(``committed``). The thread folds once the writer has committed nothing for ``idle_seconds`` and the tail
(committed, not folded) holds ``small_tail_spans``; under load, once the tail reaches ``tail_spans`` and the
thread has rested ``rest_ratio`` times as long as its last fold took; a tail of any size once its first commit is
``tail_wait_seconds`` old and the thread has rested; and at once when the tail reaches ``max_tail_spans``. The
store folds synchronously at open and close.

A fold costs about 0.17 s however few spans it takes (it makes the views again), where a query over ``runs`` pays
about 10 ms more for a tail of a hundred spans than for none. Folded at every idle moment, an agent exporting each
span as it ends (lousho's own agent does) had the daemon fold after nearly every span: five spans a second kept a
core busy (benchmarks/perf/trickle.py).

The rest bounds the fold's share of the machine under load (a fold costs more as the kept tables grow: a
session's row is made again from all its runs), and lets the tail grow instead: one fold of more spans
costs far less than several of fewer.
The fold runs on a cursor of its own: DuckDB runs its transaction beside the writer's commits (they
write different tables, so neither conflicts), releasing the GIL while it works.

Until a fold, queries over ``runs`` merge the tail in (runs_table.py), so how often it runs changes
their cost, never their answer.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import duckdb

from lousho.kernel import cpu_priority
from lousho.observe.runs import runs_table

logger = logging.getLogger(__name__)

# Under load, fold past this many unfolded spans once the thread has rested (REST_RATIO).
TAIL_SPANS = 20_000
# Fold at once past this many unfolded spans: what a query over ``runs`` recomputes stays bounded (a 100,000-span
# tail put a query of the query benchmark over 1 s under load).
MAX_TAIL_SPANS = 50_000
# Under load, rest this many times as long as the last fold took before the next: folds take at most about
# a quarter of the time (of one core), however large the store.
REST_RATIO = 3.0
# Fold after this long without a commit: the writer is idle, so the fold takes no time from an ack.
IDLE_SECONDS = 0.1
# A tail smaller than this is not folded at idle until its first commit is TAIL_WAIT_SECONDS old: a fold costs
# more than the queries of a few seconds pay for a small tail.
SMALL_TAIL_SPANS = 2_000
# Fold any tail this old once the thread has rested: what a query recomputes stays seconds of traffic, however
# slow the traffic and however rarely the writer idles.
TAIL_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class FoldStats:
    """What the fold has done, for /metrics."""

    folds: int
    folded_spans: int
    fold_seconds: float
    tail_spans: int  # committed and not yet taken by a fold (counted at commit, cleared as a fold begins)


class RunsFold:
    """The fold thread. ``lock`` is held for each fold; the store holds it for a CHECKPOINT too, which
    DuckDB refuses while another transaction is open."""

    def __init__(self, con: duckdb.DuckDBPyConnection, *, tail_spans: int = TAIL_SPANS,
                 max_tail_spans: int = MAX_TAIL_SPANS, rest_ratio: float = REST_RATIO,
                 idle_seconds: float = IDLE_SECONDS, small_tail_spans: int = SMALL_TAIL_SPANS,
                 tail_wait_seconds: float = TAIL_WAIT_SECONDS) -> None:
        self.lock = threading.Lock()
        self.folds = 0
        self.folded_spans = 0
        self.fold_seconds = 0.0
        self._con = con
        self._tail_spans = tail_spans
        self._max_tail = max(tail_spans, max_tail_spans)
        self._rest_ratio = rest_ratio
        self._idle = idle_seconds
        self._small_tail = small_tail_spans
        self._tail_wait = tail_wait_seconds
        self._rested_at = 0.0  # when the last fold ended plus its rest: monotonic seconds
        self._cond = threading.Condition()
        self._pending = 0  # spans committed since the last fold began
        self._first_commit = 0.0  # when the first of them was committed
        self._last_commit = 0.0
        self._retry_at = 0.0  # after a failed fold: none before this
        self._closing = False
        self._failures = 0
        self._thread: threading.Thread | None = None

    def start(self, nice: int = 0) -> None:
        """Fold in a thread of its own; ``nice``: how far below the request path it runs (cpu_priority.py)."""
        self._thread = threading.Thread(target=self._run, args=(nice,), name="lousho-runs-fold", daemon=True)
        self._thread.start()

    def committed(self, spans: int) -> None:
        """Called after each commit with the rows it inserted (spans, or 1 for scores alone)."""
        if not spans:
            return
        with self._cond:
            now = time.monotonic()
            if not self._pending:
                self._first_commit = now
            self._pending += spans
            self._last_commit = now
            self._cond.notify()

    def fold_now(self) -> int:
        """Fold everything committed, on the caller's thread; returns the spans folded."""
        with self._cond:
            self._pending = 0
        with self.lock:
            started = time.perf_counter()
            folded = runs_table.fold(self._con)
            took = time.perf_counter() - started
            if folded:
                self.folds += 1
                self.folded_spans += folded
                self.fold_seconds += took
        with self._cond:
            self._rested_at = time.monotonic() + took * self._rest_ratio
        return folded

    def stats(self) -> FoldStats:
        with self._cond:
            return FoldStats(self.folds, self.folded_spans, self.fold_seconds, self._pending)

    def stop(self) -> None:
        """Stop the thread (a fold under way finishes first)."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _due(self) -> bool:
        """Wait (holding ``_cond``) until a fold is due or the store closes; False on close."""
        while not self._closing:
            if not self._pending:
                self._cond.wait()
                continue
            now = time.monotonic()
            # When each rule has a fold due; each commit wakes this anyway. After a failure, none before the retry.
            due = [max(self._first_commit + self._tail_wait, self._rested_at)]
            if self._pending >= self._max_tail:
                due.append(now)
            if self._pending >= self._small_tail:
                due.append(self._last_commit + self._idle)
            if self._pending >= self._tail_spans:
                due.append(self._rested_at)
            wait = max(min(due), self._retry_at) - now
            if wait <= 0:
                return True
            self._cond.wait(wait)
        return False

    def _run(self, nice: int = 0) -> None:
        cpu_priority.lower_this_thread(nice)
        while True:
            with self._cond:
                if not self._due():
                    return
            try:
                self.fold_now()
            except Exception:  # deliberate: the tail stays in the views' answers; a later fold retries
                logger.exception("folding the kept runs failed")
                self._failures += 1
                with self._cond:
                    # Retry later and later (a damaged store fails every time), not in a loop.
                    self._pending = max(self._pending, 1)
                    self._retry_at = time.monotonic() + min(30.0, self._idle * 2**self._failures)
            else:
                self._failures = 0
