"""Acks first: the threads that load the store behind the spool run at a lower CPU priority than the ones that ack.

A request is acked once its body is synced in the spool; loading it into DuckDB can wait, as the spool keeps
it. But on a machine with few cores the loader, its decode thread, the runs' fold and DuckDB's own worker
threads take the cores the request path needs, and the acks slow to the loader's pace: the SDKs' queues then
fill and drop spans. Lowering the background threads' priority (Linux ``nice``, per thread) gives the request
path the CPU first; the loader takes whatever it leaves, which under a burst is all but the request path's
share, and all of it once the burst ends; the runs' fold runs below the loader (``FOLD_EXTRA_NICE``). The
spool's bound still caps how far behind the loader may fall.

Measured by ``benchmarks/perf/ingest.py`` (docs/performance.md "Acks first"). Raising a priority back needs a
privilege, so a lowered thread stays lowered: the loader's threads are lowered once, for their lifetime, and
DuckDB's workers inherit the priority of the thread that opens the database (``in_lowered_thread``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# The default step: CFS then gives a ready request thread about 9 times a background thread's share of a core.
BACKGROUND_NICE = 10
# The runs' fold goes this much further below the loader: the loader's commit is what makes acked spans
# queryable, the fold's kept runs are derived (``runs`` reads the unfolded tail meanwhile). At the loader's
# level the fold fell behind under a burst and took its catch-up out of the loader's drain.
FOLD_EXTRA_NICE = 5
_MOST = 19


def fold_nice(background: int) -> int:
    """The fold's step below the request path for the loader's ``background`` (0 keeps everything level)."""
    return min(background + FOLD_EXTRA_NICE, _MOST) if background > 0 else 0


def supported() -> bool:
    """Whether a thread's priority can be set apart from its process's (Linux: each thread is a task)."""
    return sys.platform.startswith("linux") and hasattr(os, "setpriority")


def lower_this_thread(step: int) -> None:
    """Lower the calling thread's CPU priority by ``step`` (0: leave it). Never raises: a platform or a
    sandbox that refuses only leaves the thread as it was."""
    if step <= 0 or not supported():
        return
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(current + step, _MOST))
    except OSError:
        return  # a priority is a preference: the daemon works the same without it


def in_lowered_thread(step: int, fn: Callable[[], T]) -> T:
    """``fn()``, run in a new thread lowered by ``step``, so the threads it starts (DuckDB's workers) inherit
    the lower priority; its result is returned and its exception raised here. With ``step`` 0, run here."""
    if step <= 0 or not supported():
        return fn()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        lower_this_thread(step)
        try:
            outcome.append(fn())
        except BaseException as e:  # handed to the caller, raised in its thread
            failure.append(e)

    thread = threading.Thread(target=run, name="lousho-open-lowered")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def thread_priority(tid: int) -> int:
    """A thread's nice value (Linux); the tests read it."""
    return os.getpriority(os.PRIO_PROCESS, tid)
