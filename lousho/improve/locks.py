"""Locks across processes on one agent directory: one cycle at a time, one writer at a time.

The watcher's lease keeps a second watcher idle; these keep a CLI approve, a rollback, the daemon's
triggered cycle and a watcher from interleaving their writes or their state updates.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol


class LoopDir(Protocol):
    """What a lock needs of ``state.Paths`` (which takes its own lock from here, so it is not imported)."""

    root: Path

    def ensure(self) -> None: ...


@contextmanager
def exclusive(paths: LoopDir, name: str, *, wait: bool = True) -> Iterator[bool]:
    """An ``fcntl`` lock on ``.lousho/<name>.lock`` across processes: one cycle (``wait=False``: yields
    False when another holds it), one writer or one state update at a time per directory. Not
    re-entrant: a holder must not take the same name again."""
    paths.ensure()
    with (paths.root / f"{name}.lock").open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
