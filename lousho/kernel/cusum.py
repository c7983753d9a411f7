"""The Bernoulli CUSUM of the regression trigger, and its threshold's calibration by simulation. A leaf module.

One definition for every part that uses it: the daemon's trigger (observe, which may import no other part)
updates it run by run; analysis and the benchmarks simulate it vectorised with the same steps.

The statistic: ``S = max(0, S + log(p1/p0))`` on a pass and ``S + log((1 - p1)/(1 - p0))`` on a failure,
alarm at ``S >= h``. ``p0`` is the pass rate of a reference of the revision's own earliest runs, ``p1 = p0 -
drop`` the drop worth an improvement cycle. Between alarms ``S`` is the log-likelihood ratio of "the rate
fell to p1 at some point" against "it is p0", so a drop is seen whenever it happens, whatever the looks.

The threshold ``h`` is set by simulation, per agent and revision, so that P(an alarm within a week of the
agent's traffic, with no change) stays within the agent's share of a weekly budget. The simulation draws
the reference too (the CUSUM runs with an estimated ``p0``, which is the main cause of false alarms at high
traffic), and it assumes runs are independent given the rate, apart from sessions: runs that share a session
are correlated, and the threshold is multiplied by the reference's design effect (an upper bound on the
session-clustered variance of its pass rate over the binomial one), with the reference's effective size
divided by it — the diffusion approximation of a CUSUM whose increments have that much more variance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# The reference: at least this many scored runs, and (by default) a day of traffic, the day's cycle in it.
REFERENCE_RUNS = 1000
REFERENCE_HOURS = 24.0
# The drop worth a cycle, p0 - p1.
DROP = 0.1
# P(a false trigger) per week, split evenly across the registered agents.
WEEKLY_BUDGET = 0.05
# The simulated horizon: a longer week is covered by scaling the budget (see ``calibrate``).
HORIZON = 7000
MAX_STREAMS = 40_000
SEED = 27
# The model each recorded rate assumes.
MODEL = ("runs independent given the pass rate within the reference and the watch, apart from sessions "
         "(threshold x the reference's design effect); the rate stays at the reference's until a drop; "
         "p0 estimated from the reference, its error simulated")


def steps(p0: float, drop: float = DROP) -> tuple[float, float]:
    """(on a pass, on a failure): the log-likelihood ratios of p1 = p0 - drop against p0.

    ``p0`` must lie strictly in (0, 1) (``reference_rate`` makes it so); p1 is at least half of p0, so a
    reference that passes less often than ``drop`` still has a drop to look for."""
    p1 = max(p0 - drop, p0 / 2)
    return math.log(p1 / p0), math.log((1 - p1) / (1 - p0))


def update(statistic: float, passed: bool, step: tuple[float, float]) -> float:
    """One run: the CUSUM's new value. Runs without a pass (failed, unscored, crashed) are failures."""
    return max(0.0, statistic + (step[0] if passed else step[1]))


def reference_rate(passes: int, runs: int) -> float:
    """The reference's pass rate, kept off 0 and 1 (half a run each side) so both steps are finite."""
    return (passes + 0.5) / (runs + 1)


def design_effect(sessions: Iterable[tuple[int, int]], runs: int, passes: int) -> float:
    """How much sessions inflate the variance of the pass rate: an upper 95% bound on the session-clustered
    variance over the binomial one (sum over sessions of (passes - n p)^2 over runs p (1 - p), plus 1.645
    of its standard error across sessions), so a reference that happens to look less clustered than the
    traffic is does not lower the threshold. Sessions are (runs, passes). 1 when no session holds more than
    one run: there is then no clustering to see (runs without a session are sessions of one)."""
    sizes = list(sessions)
    p = passes / runs if runs else 0.0
    if p <= 0.0 or p >= 1.0 or all(n <= 1 for n, _ in sizes):
        return 1.0
    squares = [(k - n * p) ** 2 for n, k in sizes]
    mean = sum(squares) / len(squares)
    spread = math.sqrt(sum((q - mean) ** 2 for q in squares) * len(squares) / max(1, len(squares) - 1))
    return max(1.0, (sum(squares) + 1.645 * spread) / (runs * p * (1 - p)))


# --- vectorised: many streams at once -------------------------------------------------------------------


def paths(outcomes: np.ndarray, on_pass: np.ndarray, on_fail: np.ndarray) -> np.ndarray:
    """The statistic after every run of every stream (rows; True = pass), each with its own steps.

    The Lindley recursion unrolled: with ``X`` the cumulative sum of steps, ``S_t = X_t - min(0, min X_{<=t})``."""
    passes = np.cumsum(outcomes, axis=1, dtype=np.int32)
    t = np.arange(1, outcomes.shape[1] + 1, dtype=np.int32)
    x = on_pass[:, None] * passes + on_fail[:, None] * (t - passes)
    low = np.minimum.accumulate(x, axis=1)
    np.minimum(low, 0.0, out=low)
    return x - low


def first_alarms(outcomes: np.ndarray, on_pass: np.ndarray, on_fail: np.ndarray, h: np.ndarray | float) -> np.ndarray:
    """The run (1-based) at which each stream first reaches ``h``; 0 where it never does."""
    hit = paths(outcomes, on_pass, on_fail) >= np.asarray(h, dtype=float).reshape(-1, 1)
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)


def iid_maxima(rng: np.random.Generator, p: float, runs: int, on_pass: np.ndarray, on_fail: np.ndarray) -> np.ndarray:
    """The largest statistic over ``runs`` independent runs at pass rate ``p``, one stream per step pair.

    Only failures raise the statistic (``on_pass < 0 < on_fail``), so it is computed at failures only: the
    gaps between them are geometric, ``(1 - p) runs`` of them per stream instead of ``runs``."""
    streams = len(on_pass)
    fails = max(1, int((1 - p) * runs + 6 * math.sqrt(runs * p * (1 - p)) + 10))
    at = np.cumsum(rng.geometric(1 - p, size=(streams, fails)), axis=1, dtype=np.int64)  # run of the j-th failure
    return failure_maxima(at, runs, on_pass, on_fail)


def failure_maxima(at: np.ndarray, runs: int, on_pass: np.ndarray, on_fail: np.ndarray) -> np.ndarray:
    """The largest statistic over the first ``runs`` runs of each stream, given the runs (1-based, increasing
    along each row) at which it failed: the statistic only rises at a failure, so it is computed there."""
    j = np.arange(1, at.shape[1] + 1)
    # Just after the j-th failure: X = on_pass (passes so far) + on_fail j; just before it, one on_fail less.
    after = on_pass[:, None] * (at - j) + on_fail[:, None] * j
    before = after - on_fail[:, None]
    low = np.minimum.accumulate(before, axis=1)
    np.minimum(low, 0.0, out=low)
    value = np.where(at <= runs, after - low, 0.0)
    return value.max(axis=1)


@dataclass(frozen=True)
class Calibration:
    """A threshold and what it was set for: P(alarm within ``week_runs`` runs, no change) <= ``alpha``."""

    h: float
    alpha: float  # the agent's share of the weekly budget
    week_runs: int
    horizon: int  # runs simulated per stream
    alpha_simulated: float  # the budget over the simulated horizon
    streams: int
    design_effect: float  # as used: rounded up to a quarter
    budget_met: bool  # False when the week is too long for the streams simulated (the rate then exceeds alpha)


def calibrate(p0: float, reference_runs: int, week_runs: int, alpha: float, design: float = 1.0,
              drop: float = DROP) -> Calibration:
    """The threshold for a reference of ``reference_runs`` runs at rate ``p0``, a week of ``week_runs`` runs.

    Each simulated stream draws its own reference (binomial, of the effective size ``reference_runs /
    design``) and runs the CUSUM with that estimate on independent runs at ``p0`` for ``min(week, HORIZON)``
    runs. A week longer than the horizon gets the budget ``alpha * horizon / week`` over the horizon: the
    probability of a false alarm is concave in the horizon once past the first few hundred runs (a constant
    hazard, mixed over the reference's error), so that is conservative. ``h`` is the simulated maxima's
    upper quantile, taken at a one-sided 95% lower bound of the allowed count, so the simulation's own noise
    errs toward fewer alarms. The simulation runs at ``p0`` rounded to 0.01 (and the design effect rounded
    up to a quarter), so agents and revisions share calibrations."""
    d = math.ceil(max(1.0, design) * 4 - 1e-9) / 4
    return _calibrate(min(0.99, max(0.01, round(p0, 2))), max(1, round(reference_runs / d)), max(1, week_runs),
                      alpha, drop, d)


@lru_cache(maxsize=256)
def _calibrate(p: float, effective_runs: int, week_runs: int, alpha: float, drop: float, d: float) -> Calibration:
    horizon = min(week_runs, HORIZON)
    alpha_sim = alpha * horizon / week_runs
    streams = min(MAX_STREAMS, max(2000, math.ceil(50 / alpha_sim)))
    allowed = alpha_sim * streams - 1.645 * math.sqrt(alpha_sim * (1 - alpha_sim) * streams)
    rng = np.random.default_rng(SEED)
    p0s = np.clip(rng.binomial(effective_runs, p, streams), 0, effective_runs)
    pairs = np.array([steps(reference_rate(int(k), effective_runs), drop) for k in range(effective_runs + 1)])
    on_pass, on_fail = pairs[p0s, 0], pairs[p0s, 1]
    maxima = np.concatenate([iid_maxima(rng, p, horizon, on_pass[i:i + 500], on_fail[i:i + 500])
                             for i in range(0, streams, 500)])
    ranked = np.sort(maxima)[::-1]
    k = max(0, math.floor(allowed))
    # Strictly above the (k+1)-th largest maximum: at most k streams reach it.
    h = float(np.nextafter(ranked[k], np.inf)) * d
    return Calibration(h, alpha, week_runs, horizon, alpha_sim, streams, d, budget_met=allowed >= 1)


def session_streams(rng: np.random.Generator, streams: int, runs: int, p: float | np.ndarray, sticky: float,
                    mean_size: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """Streams of runs in sessions (the audit's traffic model): geometric sizes of mean ``mean_size``; a
    session's first run passes at ``p``; each later run copies it with probability ``sticky``, else passes at
    ``p`` on its own. ``p`` may be one rate per stream. Returns (outcomes, session ids), both streams x runs."""
    total = streams * runs
    sizes = rng.geometric(1 / mean_size, size=int(total / mean_size * 1.2) + 100)
    while sizes.sum() < total:
        sizes = np.concatenate([sizes, rng.geometric(1 / mean_size, size=len(sizes))])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    session = np.repeat(np.arange(len(sizes)), sizes)[:total].reshape(streams, runs)
    rate = np.broadcast_to(np.asarray(p, dtype=float).reshape(-1, 1), (streams, runs))
    opened = rng.random(len(sizes)) < rate.ravel()[np.minimum(starts, total - 1)]
    own = rng.random((streams, runs)) < rate
    copy = rng.random((streams, runs)) < sticky
    is_first = np.arange(total).reshape(streams, runs) == starts[session]
    return np.where(is_first | copy, opened[session], own), session


def maxima_of(outcomes: np.ndarray, steps_: Sequence[tuple[float, float]]) -> np.ndarray:
    pairs = np.asarray(steps_, dtype=float)
    return paths(outcomes, pairs[:, 0], pairs[:, 1]).max(axis=1)
