"""Runs cases under harnesses for the step: each harness materialised once in a throwaway copy of the
agent directory, each run through the probe (or replayed from the cache), counted in the ledger."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lousho.improve.cache import Cache, Ledger, cached_run
from lousho.improve.errors import ImproveError
from lousho.improve.harness import Harness, materialize
from lousho.improve.probe import Probe
from lousho.improve.records import Case, RunRecord


@dataclass
class Runner:
    agent_dir: Path
    work_dir: Path
    probe: Probe
    probe_id: str
    cache: Cache
    ledger: Ledger
    on_run: Callable[[RunRecord], None] | None = None
    _dirs: dict[str, Path] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def harness_dir(self, harness: Harness) -> Path:
        with self._lock:
            path = self._dirs.get(harness.revision)
            if path is None:
                path = materialize(harness, self.agent_dir, self.work_dir / f"harness-{harness.revision}")
                self._dirs[harness.revision] = path
            return path

    def run_many(self, harness: Harness, cases: Sequence[Case], repeats: range) -> dict[str, list[RunRecord]]:
        where = self.harness_dir(harness)
        out: dict[str, list[RunRecord]] = {}
        for case in cases:
            if case.id in out:
                # Counts are keyed by id: a second case under one id would count its runs as the first's.
                raise ImproveError(f"two cases share the id {case.id!r}; a step's cases must have unique ids")
            records = out.setdefault(case.id, [])
            for repeat in repeats:
                record = cached_run(self.cache, self.ledger, self.probe_id, harness.revision, case, repeat,
                                    lambda case=case, repeat=repeat: self.probe(where, case, repeat))
                records.append(record)
                if self.on_run is not None:
                    self.on_run(record)
        return out
