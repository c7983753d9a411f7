"""Time ``lousho stats monitor``'s exact computation: 3 looks up to 200 runs per side, limit 1 s.

    .venv/bin/python benchmarks/perf/stats_monitor.py [--repeats 7]

For each rule it times, from cold caches, what the command computes: the boundary (root-finding on
the normal model for every rule but seed) and the exact DP at p0 and at p1. It prints the median
and the ratio to the 1 s limit, then the wall time of the whole ``lousho stats monitor`` process
(interpreter start and imports included) for context; the limit applies to the computation.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lousho.analysis import boundaries, operating
from lousho.analysis.boundaries import make_boundary
from lousho.analysis.operating import monitor_characteristics

LIMIT_S = 1.0
LOOKS = (67, 134, 200)
P0, P1 = 0.9, 0.8
RULES = ("seed", "pocock", "obf", "spending", "spending-pocock")


def _clear_caches() -> None:
    for cached in (
        boundaries.pocock,
        boundaries.obrien_fleming,
        boundaries.lan_demets,
        operating.stopping_probabilities,
    ):
        cached.cache_clear()


def time_rule(rule: str, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        _clear_caches()
        start = time.perf_counter()
        boundary = make_boundary(rule, LOOKS, None if rule == "seed" else 0.05)
        monitor_characteristics(boundary, P0, P1)
        times.append(time.perf_counter() - start)
    return times


def time_process(repeats: int) -> list[float]:
    command = [
        str(Path(sys.executable).parent / "lousho"), "stats", "monitor", "--p0", str(P0),
        "--p1", str(P1), "--rule", "spending", "--looks", ",".join(map(str, LOOKS)), "--json",
    ]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--process-repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"lousho stats monitor: looks {LOOKS} runs per side, p0 {P0}, p1 {P1}; limit {LIMIT_S} s")
    worst = 0.0
    for rule in RULES:
        median = statistics.median(time_rule(rule, args.repeats))
        worst = max(worst, median)
        print(f"  {rule:16s} median {median * 1000:8.1f} ms   ratio to limit {median / LIMIT_S:.3f}")
    print(f"  slowest rule: {worst * 1000:.1f} ms = {worst / LIMIT_S:.3f} x the limit")
    if args.process_repeats:
        process = statistics.median(time_process(args.process_repeats))
        print(
            f"  whole process (spending, imports included): median {process:.2f} s "
            f"= {process / LIMIT_S:.2f} x the limit"
        )
    return 0 if worst <= LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
