"""How often the pass-rate intervals by revision cover the true rate on the traffic model: docs/statistics.md
section 8 and ``benchmarks/perf/stats_scenarios.py``.

A revision's runs are drawn from the traffic model (``traffic_model.streams``: easy and hard cases, 30% hard,
true pass rate 0.844, or the share of hard cases that gives another ``truth``; sessions of geometric size,
mean 3, sharing a case, a repeat copying the session's first outcome with probability ``sticky``), and each
interval is computed with the arithmetic ``frames.pass_rates`` uses (``clustered.clustered_interval_rows``,
``stats.wilson_arrays``), one replicate per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from lousho.analysis import traffic_model as tm
from lousho.analysis.clustered import clustered_interval_rows
from lousho.analysis.stats import wilson_arrays

TRUTH = 0.3 * tm.P_HARD + 0.7 * tm.P_EASY
# True pass rates the coverage is checked at: a weak agent to a strong one, the traffic model's own in between.
RATES = (0.6, 0.75, TRUTH, 0.93)
RUNS = (60, 100, 200, 500, 1000)
TRAFFIC: tuple[tuple[str, float | None], ...] = (
    ("independent runs", None),
    ("sessions, sticky 0", 0.0),
    ("sessions, sticky 0.5", 0.5),
    ("sessions, sticky 0.9", 0.9),
)
_CELLS_PER_CHUNK = 4_000_000  # runs generated at once: about 0.2 GB of arrays


@dataclass(frozen=True)
class Coverage:
    clustered: float
    wilson: float
    replicates: int

    @property
    def se(self) -> float:
        return float(np.sqrt(0.05 * 0.95 / self.replicates))


def hard_share(truth: float) -> float:
    """The share of hard cases that makes ``truth`` the pass rate (0.3 for the model's own 0.844)."""
    if not tm.P_HARD <= truth <= tm.P_EASY:
        raise ValueError(f"a true rate of the easy/hard mix lies in [{tm.P_HARD}, {tm.P_EASY}], not {truth}")
    return 0.3 if truth == TRUTH else (tm.P_EASY - truth) / (tm.P_EASY - tm.P_HARD)


def revision_runs(n: int, reps: int, sticky: float | None, seed: int,
                  truth: float = TRUTH) -> tuple[np.ndarray, np.ndarray]:
    """``reps`` revisions of ``n`` runs each at true pass rate ``truth``: (outcomes 0/1, session labels), one
    revision per row."""
    scenario = tm.Scenario("interval", hard_before=hard_share(truth), sticky=sticky)
    s = tm.streams(scenario, reps, concurrent=False, seed=seed, before=n, after=0)
    return s.y, s.session


def coverage(n: int, reps: int, sticky: float | None, seed: int = 0, truth: float = TRUTH) -> Coverage:
    """P(the interval holds ``truth``) over ``reps`` revisions of ``n`` runs, for both intervals."""
    hits = np.zeros(2)
    chunk = max(1, min(reps, _CELLS_PER_CHUNK // n))
    for start in range(0, reps, chunk):
        rows = min(chunk, reps - start)
        y, session = revision_runs(n, rows, sticky, seed + start, truth)
        low, high, _, _ = clustered_interval_rows(y, session, np.ones(y.shape, dtype=bool))
        hits[0] += np.count_nonzero((low <= truth) & (truth <= high))
        low, high = wilson_arrays(y.sum(axis=1).astype(np.int64), np.full(rows, n))
        hits[1] += np.count_nonzero((low <= truth) & (truth <= high))
    return Coverage(float(hits[0] / reps), float(hits[1] / reps), reps)


def rows(reps: int, runs: tuple[int, ...] = RUNS, seed: int = 8) -> list[tuple[str, list[Coverage]]]:
    return [(label, [coverage(n, reps, sticky, seed + n) for n in runs]) for label, sticky in TRAFFIC]


@lru_cache(maxsize=1)  # fixed seeds: the same text every time, so a process renders it once
def section(table, reps: int = 2_000) -> str:
    """The markdown section of docs/statistics.md (``table`` renders headers and rows)."""
    measured = rows(reps)
    body = table(["traffic", *(f"{n:,} runs" for n in RUNS)],
                 [[label, *(f"{c.clustered:.3f} / {c.wilson:.3f}" for c in cells)] for label, cells in measured])
    in_sessions = [c.wilson for label, cells in measured if label.startswith("sessions") for c in cells]
    wilson_low, wilson_high = min(in_sessions), max(in_sessions)
    return f"""## 8. Intervals by revision

`pass_rates` (and the agent page's table and `lousho plot pass-rate`, with the same arithmetic) gives each
revision's pass rate a 95% interval that holds when runs cluster: runs of one session share a case and often
an outcome, so the interval is cluster-robust by **session** (`conversation_id`), a run without a session
clustered by its **case id**, a run with neither its own cluster (`clustered.clustered_interval_counts`). It is
Wilson's score interval at the effective number of runs (runs over the CR1 design effect, never below 1) with
Student's t for the normal quantile, its degrees of freedom from the kurtosis of the cluster sums, capped at
clusters − 1. With no session and no case it is exactly the Wilson interval; with every run passing (or
failing) it counts clusters, not runs. The `ci_method` column says which interval a frame holds;
`pass_rates(..., interval="wilson")` gives the Wilson interval, which assumes independent runs.

Coverage of the true pass rate, cluster-robust / Wilson: {reps:,} revisions a cell (s.e. about
{Coverage(0, 0, reps).se:.3f}), fixed seeds, runs drawn from the traffic model (easy and hard cases, 30% hard,
true rate {TRUTH:.3f}; sessions of mean size 3 sharing a case, a repeat copying the session's first outcome
with probability sticky).

{body}

tests/analysis/test_clustered_monitor.py asserts 0.95 ± 0.01 (plus 3 s.e.) in sessions with 20,000 revisions
a size: through `pass_rates` at 60 and 120 runs (sticky 0.5; 60 also at sticky 0.9), through its arithmetic at
300 and 1,000. Between the sizes above the coverage moves with the lattice of failure counts, by up to about
0.015 below 150 runs; `benchmarks/perf/stats_scenarios.py` prints a dense grid (docs/performance.md). The
interval is conservative when failures are rare and the runs few (a true rate near 0.93 under about 150 runs).
Wilson's interval covers {wilson_low:.2f}–{wilson_high:.2f} in sessions.

**Wilson 95% intervals for the design's counts** (independent runs):

{table(["passes", "Wilson 95% interval"], _design_counts())}"""


def _design_counts() -> list[list[str]]:
    from lousho.analysis.stats import wilson_interval

    out = []
    for passes, runs in ((18, 20), (54, 60), (2, 3), (3, 3), (5, 6), (6, 6)):
        interval = wilson_interval(passes, runs)
        out.append([f"{passes}/{runs}", f"[{interval.low:.3f}, {interval.high:.3f}]"])
    return out
