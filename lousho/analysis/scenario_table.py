"""The monitor's scenario table: P(roll back) of each design on each kind of traffic of the audit's suite
(``traffic_model.SCENARIOS``), and the runs each design spends until its decision. docs/statistics.md
section 11 and ``benchmarks/perf/stats_scenarios.py``.

Each design runs as the monitor is configured by default (``MonitorConfig(design=...)``: looks at 20, 40 and 60
base runs, z >= 2.1; the seed design's drop > 0.05; a 20% holdback of sessions in the concurrent design), on
streams of the traffic model with fixed seeds, through ``traffic_model.decisions`` (checked against
``monitor.decide`` stream by stream in tests/analysis/test_clustered_monitor.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from lousho.analysis import traffic_model as tm
from lousho.analysis.monitor import DESIGNS, MonitorConfig
from lousho.kernel.outage_rule import THRESHOLD

# The scenarios the runs table reads: what a decision costs with no change and against a real drop.
NO_CHANGE = "independent runs, stable mix"
DROP = "a real drop 0.9 -> 0.8, independent runs"
CRASH = "the edit crashes 50% of hard cases (0.844 -> 0.761)"


@dataclass(frozen=True)
class Cell:
    """One design on one scenario: P(roll back), and the mean runs the traffic served from the apply until
    the decision (``runs``) and those the edit served (``edit_runs``)."""

    rate: float
    runs: float
    edit_runs: float
    replicates: int

    @property
    def se(self) -> float:
        return math.sqrt(max(self.rate * (1 - self.rate), 1e-12) / self.replicates)


def cells(scenario: tm.Scenario, reps: int, seed: int) -> dict[str, Cell]:
    """Every design on ``scenario``: the before/after designs share one set of streams."""
    out: dict[str, Cell] = {}
    shared = None
    for design in DESIGNS:
        config = MonitorConfig(design=design)
        boundary = config.boundary
        if design == "concurrent":
            s = tm.streams(scenario, reps, concurrent=True, holdback=config.holdback, seed=seed)
        else:
            shared = shared or tm.streams(scenario, reps, concurrent=False, seed=seed)
            s = shared
        d = tm.decisions(s, design, boundary.looks, boundary.z, boundary.min_drop)
        out[design] = Cell(float(d.rolled.mean()), float(d.runs.mean()), float(d.edit_runs.mean()), reps)
    return out


def rows(reps: int, seed: int = 27) -> list[tuple[tm.Scenario, dict[str, Cell]]]:
    return [(scenario, cells(scenario, reps, seed + i)) for i, scenario in enumerate(tm.SCENARIOS)]


def by_name(measured: list[tuple[tm.Scenario, dict[str, Cell]]]) -> dict[str, dict[str, Cell]]:
    return {scenario.name: by for scenario, by in measured}


def rate_table(measured: list[tuple[tm.Scenario, dict[str, Cell]]], *, with_se: bool = False) -> list[list[str]]:
    def cell(c: Cell) -> str:
        return f"{c.rate:.3f} ± {c.se:.3f}" if with_se else f"{c.rate:.3f}"

    return [[scenario.name, "power" if scenario.real_change else "false rollback",
             *(cell(by[design]) for design in DESIGNS)] for scenario, by in measured]


def runs_table(measured: list[tuple[tm.Scenario, dict[str, Cell]]]) -> list[list[str]]:
    named = by_name(measured)
    return [[design, *(f"{named[name][design].runs:.0f} ({named[name][design].edit_runs:.0f})"
                       for name in (NO_CHANGE, DROP, CRASH))] for design in DESIGNS]


RATE_HEADERS = ["scenario", "P(roll back) is", *DESIGNS]
RUNS_HEADERS = ["design", "no change", "0.9 → 0.8", "crash edit"]


@lru_cache(maxsize=1)  # fixed seeds: the same text every time, so a process renders it once
def section(table, reps: int = 2_000) -> str:
    """The markdown section of docs/statistics.md (``table`` renders headers and rows)."""
    measured = rows(reps)
    worst = max(by["concurrent"].rate for scenario, by in measured if not scenario.real_change)
    config = MonitorConfig()
    quiet = by_name(measured)[NO_CHANGE]
    ratio = quiet["concurrent"].runs / quiet["stratified"].runs
    return f"""## 11. The monitor on real traffic: the scenario table

P(roll back) of each monitor design (`MonitorConfig(design=...)`, its defaults: looks at 20, 40 and 60 base
runs, z ≥ 2.1) on each kind of traffic of the audit's suite, {reps:,} streams a cell (s.e. at most
{0.5 / math.sqrt(reps):.3f}, about {math.sqrt(0.05 * 0.95 / reps):.3f} near 0.05), fixed seeds
(`lousho/analysis/scenario_table.py`; `benchmarks/perf/stats_scenarios.py` prints it with 20,000 a cell).
With no real change it is the false-rollback rate; the last two rows are power.

What the rates assume (`lousho/analysis/traffic_model.py`): two kinds of case, easy (p = {tm.P_EASY}) and hard
(p = {tm.P_HARD}), 30% hard unless a row says otherwise; a mix that steps at the apply or swings ±10 points over
a day; outages of {tm.OUTAGE_RUNS} consecutive runs that fail with a verdict, each showing a provider error on a
model call (nothing else does); sessions of geometric size (mean
{tm.SESSION_MEAN:g}) sharing a case, a repeat copying the session's first outcome with probability sticky; runs
otherwise independent. **concurrent** (the default): {config.holdback:.0%} of sessions keep the base
revision while the edit is watched, arms compared at each look by the pooled z over the square root of the
sessions' design effect, a run without a verdict a failure. **stratified** (no holdback possible): the
{config.looks[-1]} base runs nearest before the apply against the runs after it, within case strata
(CMH) with the sessions' design effect, a run without a verdict a failure, and the runs left out in the
outage windows it detects as the live monitor does, {THRESHOLD} or more runs in a row with a provider error (the
breaker's rule, `outage_rule.in_outage`): no oracle of the outages, and a crash, which shows no provider error, is
never left out. **seed** (`MonitorConfig(design="seed")`, as first built): before/after, the pooled z and a drop over
0.05, runs without a verdict unseen; its stated rates assume independent runs and a stable mix.

{table(RATE_HEADERS, rate_table(measured))}

The concurrent design's false rollback stays at or under {worst:.3f} in every scenario without a change.

Runs the traffic served from the apply until the decision (a rollback, else the last look), mean over the
streams, and in brackets those the edit served; each is one agent run with its model calls. The concurrent
design waits for {config.looks[-1]} runs of the {config.holdback:.0%} holdback, {ratio:.1f} times as many runs as a
before/after design, which reuses base runs from before the apply; the seed design waits longer for a crashing
edit, whose crashed runs it does not count.

{table(RUNS_HEADERS, runs_table(measured))}"""
