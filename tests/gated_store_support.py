"""The real span store, held at a gate: a loader behind it queues what comes, as behind a slow disk."""

from __future__ import annotations

import threading
from pathlib import Path

from lousho.observe.store.span_store import AppendResult, SpanStore


class GatedStore(SpanStore):
    """Every append waits until the test opens ``gate``; ``entered`` is set once one is waiting. Each append
    records the spans it inserted and the bytes its commit added to the WAL, in ``loads``."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, fold_thread=False)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.loads: list[tuple[int, int]] = []
        self._wal = path.with_name(path.name + ".wal")

    def _wal_bytes(self) -> int:
        return self._wal.stat().st_size if self._wal.exists() else 0

    def append(self, batches, spool_seq=None) -> AppendResult:  # noqa: ANN001 (the base's signature)
        self.entered.set()
        assert self.gate.wait(60)
        before = self._wal_bytes()
        result = super().append(batches, spool_seq=spool_seq)
        self.loads.append((result.inserted, self._wal_bytes() - before))
        return result
