"""The writer's filter of recent span keys: what one commit's lookup and add cost as the filter fills.

Commits of ``--batch`` random keys into ``RecentKeys`` at its default capacity and generation size, until it is
full and evicting; prints the median ms of ``fresh`` (the lookup and the repeats within the batch) and ``add``
at each fill level, next to the previous layout measured in the same run (64 Ki generations, lookups in the
batch's own order). Not a timed test: run by hand.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from lousho.observe.store import recent_keys
from lousho.observe.store.recent_keys import RecentKeys


def _unsorted_held(self: RecentKeys, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """The lookup as it was: each generation searched in the batch's order."""
    h = recent_keys.mix(hi, lo)
    found = np.zeros(len(h), dtype=bool)
    for generation in (*self._frozen, self._open):
        found |= generation.find(h, hi, lo)[0]
    return found


def measure(batch: int, commits: int, generation: int, sorted_lookups: bool, seed: int) -> list[tuple[int, float,
                                                                                                        float]]:
    rng = np.random.default_rng(seed)
    recent = RecentKeys(recent_keys.DEFAULT_CAPACITY, generation)
    rows = []
    for _ in range(commits):
        hi = rng.integers(0, 2**63, batch, dtype=np.uint64)
        lo = rng.integers(0, 2**63, batch, dtype=np.uint64)
        started = time.perf_counter()
        if sorted_lookups:
            fresh = recent.fresh(hi, lo)
        else:
            fresh = ~_unsorted_held(recent, hi, lo) & recent_keys.first_occurrences(hi, lo)
        looked = time.perf_counter()
        recent.add(hi[fresh], lo[fresh])
        rows.append((len(recent), looked - started, time.perf_counter() - looked))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=37_376, help="keys per commit (the ingest benchmark's loads)")
    p.add_argument("--commits", type=int, default=90)
    args = p.parse_args(argv)
    print(f"RecentKeys, {args.batch:,} keys a commit, capacity {recent_keys.DEFAULT_CAPACITY:,}; "
          f"load {os.getloadavg()[0]:.2f}")
    layouts = {"now": measure(args.batch, args.commits, recent_keys.DEFAULT_GENERATION, True, 1),
               "before": measure(args.batch, args.commits, 64 * 1024, False, 1)}
    print("| keys held | lookup now (ms) | add now (ms) | lookup before (ms) | add before (ms) | µs/key now / before |")
    print("|---|---|---|---|---|---|")
    step = max(1, args.commits // 6)
    for start in range(0, args.commits, step):
        cells = []
        for rows in layouts.values():
            part = rows[start:start + step]
            cells.append((statistics.median(r[1] for r in part) * 1e3, statistics.median(r[2] for r in part) * 1e3))
        held = layouts["now"][min(start + step, args.commits) - 1][0]
        per_key = [(look + add) * 1e3 / args.batch for look, add in cells]
        print(f"| {held:,} | {cells[0][0]:.1f} | {cells[0][1]:.1f} | {cells[1][0]:.1f} | {cells[1][1]:.1f} | "
              f"{per_key[0]:.2f} / {per_key[1]:.2f} |")
    print(f"reproduce: .venv/bin/python benchmarks/perf/recent_keys.py --batch {args.batch} --commits {args.commits}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
