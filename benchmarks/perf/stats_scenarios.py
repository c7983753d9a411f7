"""The monitor's scenario table (docs/statistics.md section 11) with more streams, the runs each design spends
until its decision, and the coverage of the pass-rate interval by revision on a dense grid of run counts
(section 8).

    .venv/bin/python benchmarks/perf/stats_scenarios.py [--replicates 20000] [--interval-replicates 20000]

Every design runs as the monitor is configured by default (``MonitorConfig(design=...)``) on the traffic
model's streams with fixed seeds (``lousho.analysis.scenario_table``). Runs are agent runs the traffic served
from the apply until the decision, each with its model calls; in brackets, those the edit served. The exit
code is 1 when a design meant for real traffic (concurrent, stratified) rolls back more than 0.05 + 3 s.e. of
the time in a scenario without a change, or the interval's coverage in sessions leaves 0.95 ± (0.01 + 3 s.e.)
at a size the tests assert at the model's true rate (0.844; other rates: tests/analysis/test_interval_coverage.py).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from lousho.analysis import interval_table, scenario_table
from lousho.analysis.monitor import DESIGNS

DENSE_RUNS = (56, 58, 60, 62, 64, 66, 70, 75, 80, 90, 100, 120, 150, 200, 300, 600, 1000)
# The run counts tests/analysis/test_interval_coverage.py asserts, at the traffic model's rate 0.844 in sessions
# (the same seeds), less the lattice jump it asserts apart: 60 runs in sticky 0.9 sessions.
ASSERTED_RUNS = (60, 80, 120, 200, 300, 600, 1000)
LATTICE = {(0.9, 60)}


def _markdown(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def scenarios(replicates: int) -> int:
    start = time.perf_counter()
    measured = scenario_table.rows(replicates)
    print(f"## The monitor on the scenario suite: P(roll back), {replicates:,} streams a cell, ± 1 s.e.\n")
    print(_markdown(scenario_table.RATE_HEADERS, scenario_table.rate_table(measured, with_se=True)))
    print("\nRuns from the apply to the decision (those the edit served), mean over the streams:\n")
    print(_markdown(scenario_table.RUNS_HEADERS, scenario_table.runs_table(measured)))
    over = [(scenario.name, design) for scenario, by in measured if not scenario.real_change
            for design in ("concurrent", "stratified") if by[design].rate > 0.05 + 3 * by[design].se]
    print(f"\n{time.perf_counter() - start:.0f} s; designs over 0.05 + 3 s.e. with no change: {over or 'none'}")
    named = scenario_table.by_name(measured)
    for design in DESIGNS:
        quiet, drop = named[scenario_table.NO_CHANGE][design], named[scenario_table.DROP][design]
        print(f"  {design:10s} runs to a decision: {quiet.runs:.0f} with no change, {drop.runs:.0f} against "
              f"0.9 -> 0.8 (the edit served {quiet.edit_runs:.0f} / {drop.edit_runs:.0f})")
    return len(over)


def intervals(replicates: int) -> int:
    start = time.perf_counter()
    print(f"\n## Coverage of the 95% interval by revision, cluster-robust / Wilson, {replicates:,} revisions a cell\n")
    se = math.sqrt(0.05 * 0.95 / replicates)
    rows, off = [], 0
    for label, sticky in interval_table.TRAFFIC:
        cells = []
        for n in DENSE_RUNS:
            c = interval_table.coverage(n, replicates, sticky, seed=interval_table.seed(n, interval_table.TRUTH))
            cells.append(f"{c.clustered:.3f} / {c.wilson:.3f}")
            asserted = sticky is not None and n in ASSERTED_RUNS and (sticky, n) not in LATTICE
            off += asserted and abs(c.clustered - 0.95) > 0.01 + 3 * se
        rows.append([label, *cells])
        print(f"  {label}: done", file=sys.stderr, flush=True)
    # One column per run count is too wide to read: the table is printed transposed.
    print(_markdown(["runs", *(label for label, _ in interval_table.TRAFFIC)],
                    [[f"{n:,}", *(row[1 + i] for row in rows)] for i, n in enumerate(DENSE_RUNS)]))
    print(f"\n{time.perf_counter() - start:.0f} s; s.e. {se:.4f}; asserted sizes out of 0.95 ± (0.01 + 3 s.e.): {off}")
    return off


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20_000, help="streams per scenario and design")
    parser.add_argument("--interval-replicates", type=int, default=20_000, help="revisions per cell (0: skip)")
    args = parser.parse_args()
    failed = scenarios(args.replicates)
    if args.interval_replicates:
        failed += intervals(args.interval_replicates)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
