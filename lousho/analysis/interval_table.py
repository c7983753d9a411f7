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
from lousho.analysis.clustered import clustered_interval_counts, clustered_interval_rows
from lousho.analysis.stats import wilson_arrays

TRUTH = 0.3 * tm.P_HARD + 0.7 * tm.P_EASY
# True pass rates the coverage is checked at: a weak agent to a strong one, the traffic model's own in between.
RATES = (0.6, 0.75, TRUTH, 0.93, 0.95)
RUNS = (60, 80, 120, 200, 300, 600, 1000)
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


def exact_independent(n: int, truth: float) -> float:
    """The interval's coverage of ``truth`` on ``n`` independent runs, exactly: over every count of passes, each
    run its own cluster (what ``pass_rates`` has with no session and no case), weighted by its binomial
    probability."""
    from scipy.stats import binom  # a second to import: only the page and the tests need it

    passes = np.arange(n + 1)
    outcomes = (np.arange(n)[None, :] < passes[:, None]).astype(float)
    low, high, _, _ = clustered_interval_counts(outcomes.ravel(), np.ones(outcomes.size), np.repeat(passes, n), n + 1)
    return float(binom.pmf(passes, n, truth)[(low <= truth) & (truth <= high)].sum())


def seed(n: int, truth: float) -> int:
    """The fixed seed of a cell, one stream per run count and rate (shared by the page, the tests and the
    benchmark, so they state the same draws)."""
    return n + 1000 * RATES.index(truth)


def rows(reps: int, runs: tuple[int, ...] = RUNS) -> list[tuple[str, float, list[Coverage]]]:
    """(traffic, true rate, one coverage per run count): independent runs exactly (``replicates`` 0), sessions
    simulated."""
    out = []
    for label, sticky in TRAFFIC:
        for truth in RATES:
            if sticky is None:
                # With each run its own cluster the interval is Wilson's: one exact coverage is both columns.
                cells = [Coverage(exact, exact, 0) for exact in (exact_independent(n, truth) for n in runs)]
            else:
                cells = [coverage(n, reps, sticky, seed(n, truth), truth) for n in runs]
            out.append((label, truth, cells))
    return out


@lru_cache(maxsize=1)  # fixed seeds: the same text every time, so a process renders it once
def section(table, reps: int = 2_000) -> str:
    """The markdown section of docs/statistics.md (``table`` renders headers and rows)."""
    measured = rows(reps)
    body = table(["traffic", "true rate", *(f"{n:,} runs" for n in RUNS)],
                 [[label, f"{truth:.3g}", *(f"{c.clustered:.3f}" for c in cells)] for label, truth, cells in measured])
    in_sessions = [c.wilson for label, _, cells in measured if label.startswith("sessions") for c in cells]
    few = [c.clustered for label, truth, cells in measured if truth == 0.93 and label.startswith("sessions")
           for n, c in zip(RUNS, cells, strict=True) if n <= 120]
    return f"""## 8. Intervals by revision

`pass_rates` (and the agent page's table and `lousho plot pass-rate`, with the same arithmetic) gives each
revision's pass rate a 95% interval that holds when runs cluster: runs of one session share a case and often
an outcome, so the interval is cluster-robust by **session** (`conversation_id`), a run without a session
clustered by its **case id**, a run with neither its own cluster (`clustered.clustered_interval_counts`). It is
Wilson's score interval at the effective number of runs, runs over the design effect (never below 1), with
Student's t for the normal quantile. The design effect is the cluster-robust variance's ratio to p(1 − p)/n,
with the small-sample factor G<sub>e</sub>/(G<sub>e</sub> − 1) on Kish's effective number of clusters
G<sub>e</sub> = n² / Σ m<sub>g</sub>² (sessions are of unequal sizes, and CR1's G/(G − 1) left the interval at
0.935–0.939 between 62 and 75 runs); the t's degrees of freedom come from the kurtosis of the cluster sums,
capped at clusters − 1. With no session and no case it is exactly the Wilson interval; with every run passing
(or failing) it counts clusters, not runs. No lower bound is above that of a revision whose every run passed
(Wilson's at 1 on its G clusters, `clustered.all_pass_bound`), no upper bound below the all-fail one: a few
failures must not make the interval surer than none (with the t's degrees from the kurtosis, two failures in
separate sessions of 140 runs gave 0.932 against the all-pass 0.907). So a rate above that edge is never
rejected from the passing side, and there the upper bound takes all 5% (the one-sided t, at G − 1 degrees:
below); below it each bound takes 2.5%. This is the reasoning of Blaker's exact tests, on this interval; the
tests enumerate every outcome of small designs against the edge. The `ci_method` column says which interval a
frame holds; `pass_rates(..., interval="wilson")` gives the Wilson interval, which assumes independent runs.

Coverage of the true pass rate: independent runs exactly (every count of passes), sessions by simulation with
{reps:,} revisions a cell (s.e. about {Coverage(0, 0, reps).se:.3f}), fixed seeds, runs drawn from the traffic
model (easy and hard cases, the share of hard ones set for the true rate, 30% for {TRUTH:.3f}; sessions of mean
size 3 sharing a case, a repeat copying the session's first outcome with probability sticky).

{body}

At {reps:,} revisions a cell, a figure strays from its cell's coverage by up to about 0.01 (2 s.e.).
tests/analysis/test_interval_coverage.py asserts 0.95 ± 0.01 (plus 3 s.e.) with 20,000 revisions a cell on
every cell of this grid in sessions, run counts between the grid's at 0.93, independent runs exactly, and
`pass_rates` itself at three cells. At 20,000 a cell every cell of the grid in sessions lies in 0.943–0.962,
and at 0.844 and 0.93 the run counts between the grid's from 56 to 300 runs in 0.942–0.956. Above the grid, at
a true rate of 0.97 (1–2 failures in 60 runs), it is not held everywhere: 0.936–0.939 at 60–120 runs in sticky
0.9 sessions, 0.938–0.966 with the lattice's jumps at sticky 0, 0.942–0.956 elsewhere (the one-sided t at the
kurtosis' degrees: 0.945–0.969, 14 of the 21 cells above 0.96). Two things shape it:

- **Few failures.** At a true rate of 0.93 (4–8 failures in 60–120 runs) the lower bound is above 0.93 in at
  most 0.01% of revisions, so every miss is the upper bound's. All 60 runs pass in about 19% of revisions at
  sticky 0.9 (4% at sticky 0); those runs cannot tell sticky sessions from a strong agent, so the interval
  must keep 0.93 inside whenever it sees no failure or a few. With 2.5% to each bound it covered 0.980–0.984
  at 60–120 runs and 0.97–0.98 up to 145: half the 5% was never spent. Now 0.93 is above the edge (0.83 at
  60 runs, 0.91 at 140), and the upper bound takes all 5%, with t at G − 1 degrees rather than the kurtosis'.
  A revision reaches that bound only by seeing more failures than the rate gives, spread over many sessions,
  so its variance is measured on many clusters; the kurtosis' degrees, about twice the number of failing
  clusters, describe the revisions with few failures, which only the lower bound can miss on. With them the
  upper bound missed 3.3–4.1% where 5% was wanted, and the interval covered 0.959–0.967 from 60 to 150 runs
  (two grid cells and six between them out of the band); at G − 1 degrees it misses 4.6–5.3% and the interval
  covers {min(few):.3f}–{max(few):.3f} at 60–120 runs here, 0.945–0.956 from 56 to 150 runs at 20,000 a cell.
  Where both bounds can miss, each keeps the kurtosis' degrees: there the lower bound misses up to 3.7% for
  its 2.5% in sticky sessions (a few failures in separate sessions look like independent runs), and the
  upper bound's 1.6–2.5% makes up for it; G − 1 degrees on both sides took 160–300 runs at 0.93 down to
  0.935–0.946. `benchmarks/perf/interval_variants.py` measures each bound's misses, and the intervals tried
  on this grid (4,000 revisions a cell): ours is outside 0.95 ± 0.01 in one cell of 105 (the lattice cell
  below), the kurtosis' degrees on the one-sided bound in 22 (every cell at 0.95 under 300 runs among them),
  equal tails in 23; the normal quantile on the bound away from one half in 35; a score interval on the
  cluster-robust variance at the hypothesised rate covers 0.86–0.93 in sticky sessions (59 out); the
  cluster-robust t with Hall's transformation for the skewness of the cluster sums leaves 60–80 runs at 0.93
  at 0.983–0.991 and covers 0.922–0.939 at 60–120 runs at the other rates (44 out). Wilson's interval at the
  runs over the cell's *true* design effect, which no interval can know, is out in 9.
- **The lattice of pass counts.** With few runs a cell's coverage jumps as the count of passes an interval
  admits changes: on independent runs Wilson's exact coverage is 0.938 at 80 runs and a rate of 0.844, 0.964
  at 60 and 200 runs and 0.93, and our interval is Wilson's there. In sessions the same jumps show between
  the grid's run counts: at 0.844 the dense grid of `benchmarks/perf/stats_scenarios.py` (docs/performance.md,
  20,000 revisions a cell) gave 0.961–0.974 at 56–58 runs with equal tails, and gives 0.941–0.958 from 56 to
  1,000 runs now (the one-sided rule applies there: 0.844 is above the edge up to about 70 runs). On the
  grid above, 60 runs at sticky 0, rate 0.6, cover 0.962, which the tests assert inside their 3 s.e.

Wilson's interval covers {min(in_sessions):.2f}–{max(in_sessions):.2f} in sessions.

**Wilson 95% intervals for the design's counts** (independent runs):

{table(["passes", "Wilson 95% interval"], _design_counts())}"""


def _design_counts() -> list[list[str]]:
    from lousho.analysis.stats import wilson_interval

    out = []
    for passes, runs in ((18, 20), (54, 60), (2, 3), (3, 3), (5, 6), (6, 6)):
        interval = wilson_interval(passes, runs)
        out.append([f"{passes}/{runs}", f"[{interval.low:.3f}, {interval.high:.3f}]"])
    return out
