"""The regression trigger's scenario table: P(a false trigger in a week) with no change and P(a 0.9 -> 0.8 drop
caught within 300 runs), for the CUSUM (iid and in sessions) and the seeds' window rule, and what each
false trigger costs in cycles.

    .venv/bin/python benchmarks/perf/stats_trigger.py [--replicates 20000] [--session-replicates 2000]

Every replicate draws its own reference and gets its own calibrated threshold (``lousho.kernel.cusum``, the
daemon's own steps and calibration). A false trigger starts one improvement cycle: its model calls are the
cycle's (``benchmarks/perf/improve_step.py`` measures one), so the expected false cycles per agent-week are
the calls' multiplier.
"""

from __future__ import annotations

import argparse
import sys
import time

from lousho.analysis import trigger_table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20_000)
    parser.add_argument("--session-replicates", type=int, default=2_000)
    args = parser.parse_args()
    start = time.perf_counter()
    print("| detector | runs a day | p | reference | median h | P(false trigger in a week) | P(caught <= 300) "
          "| false cycles per agent-week |")
    print("|---|---|---|---|---|---|---|---|")
    over = 0
    for r in trigger_table.rows(args.replicates, args.session_replicates, full=True):
        caught = "" if r.caught_300 is None else f"{r.caught_300:.3f}"
        over += r.false_week > trigger_table.BUDGET + 3 * r.se
        print(f"| {r.scenario} | {r.runs_per_day:,} | {r.p} | {r.reference:,} | {r.threshold:.2f} | "
              f"{r.false_week:.4f} ± {r.se:.4f} | {caught} | {r.false_week:.3f} |", flush=True)
    for per_day in (300, 3000):
        rate = trigger_table.seed_rule_false_week(0.9, per_day, min(args.replicates, 2000))
        print(f"| seed window rule, iid | {per_day:,} | 0.9 | — | — | {rate:.4f} | | ≥ {rate:.3f} "
              "(one per revision) |")
    print(f"\n{args.replicates:,} replicates ({args.session_replicates:,} in sessions); "
          f"{time.perf_counter() - start:.0f} s; rows over the budget by more than 3 SE: {over}")
    return 0 if over == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
