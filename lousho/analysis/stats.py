"""Pure statistics over pass/fail counts: the pooled z, Wilson intervals, pass^k, the sign test.

Every function takes counts, not frames, so a Polars caller can use the scalar form per row or the
``*_arrays`` form on whole columns (``series.to_numpy()``). Sign convention throughout: a positive
``z`` or ``drop`` means the applied (candidate) revision passes *less* often than the base.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import bdtrc, comb, gammaln, ndtri, xlog1py, xlogy

from lousho.analysis import _checks
from lousho.analysis.errors import BadInputError
from lousho.kernel import monitor_rule


@dataclass(frozen=True)
class Interval:
    """A pass-rate estimate with its confidence interval."""

    estimate: float
    low: float
    high: float


@dataclass(frozen=True)
class SignTest:
    """Exact one-sided sign test on paired differences (ties dropped, as the test requires)."""

    positive: int
    negative: int
    ties: int
    p_value: float


def pooled_z(base_passes: int, base_runs: int, applied_passes: int, applied_runs: int) -> float:
    """The pooled two-proportion z of base minus applied, on cumulative counts.

    ``z = (p_b - p_a) / sqrt(p(1 - p)(1/n_b + 1/n_a))`` with ``p`` the pooled pass rate. When both
    sides all pass or all fail the standard error is 0 and there is no evidence of a drop: z = 0.
    """
    _checks.counts(base_passes, base_runs)
    _checks.counts(applied_passes, applied_runs)
    return monitor_rule.pooled_z(base_passes, base_runs, applied_passes, applied_runs)


def pooled_z_arrays(
    base_passes: ArrayLike, base_runs: ArrayLike, applied_passes: ArrayLike, applied_runs: ArrayLike
) -> NDArray[np.float64]:
    """``monitor_rule.pooled_z`` over arrays (no argument checks): the DP and the monitor share it."""
    xb = np.asarray(base_passes, dtype=float)
    xa = np.asarray(applied_passes, dtype=float)
    nb = np.asarray(base_runs, dtype=float)
    na = np.asarray(applied_runs, dtype=float)
    pooled = (xb + xa) / (nb + na)
    se = np.sqrt(pooled * (1.0 - pooled) * (1.0 / nb + 1.0 / na))
    diff = xb / nb - xa / na
    safe = np.where(se > 0, se, 1.0)
    return np.where(se > 0, diff / safe, 0.0)


def wilson_interval(passes: int, runs: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for a pass rate (good at small n and near 0 or 1, unlike Wald)."""
    _checks.counts(passes, runs)
    low, high = wilson_arrays(np.asarray(passes), np.asarray(runs), confidence)
    return Interval(estimate=passes / runs, low=float(low), high=float(high))


def wilson_arrays(
    passes: ArrayLike, runs: ArrayLike, confidence: float = 0.95
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Vectorised Wilson bounds for columns of counts; every row needs runs >= 1."""
    _checks.probability("confidence", confidence)
    x, n = _count_arrays(passes, runs)
    z = ndtri(0.5 + confidence / 2.0)
    phat = x / n
    denom = 1.0 + z * z / n
    centre = (phat + z * z / (2.0 * n)) / denom
    half = z / denom * np.sqrt(phat * (1.0 - phat) / n + z * z / (4.0 * n * n))
    # At 0/n the low bound is exactly 0 and at n/n the high bound exactly 1; the formula leaves
    # rounding noise there (2.8e-17 at 0/12), which would put the estimate outside its interval.
    low = np.where(x == 0, 0.0, np.clip(centre - half, 0.0, 1.0))
    high = np.where(x == n, 1.0, np.clip(centre + half, 0.0, 1.0))
    return low, high


def pass_hat_k(passes: int, runs: int, k: int) -> float:
    """Unbiased pass^k: the chance that k fresh runs all pass, ``C(c, k) / C(n, k)``.

    Unbiased because it averages the indicator "all k pass" over every k-subset of the n runs
    (tau-bench's estimator); the plug-in ``(c/n)^k`` is biased upwards at small n.
    """
    _checks.counts(passes, runs)
    return float(pass_hat_k_arrays(np.asarray(passes), np.asarray(runs), k))


def pass_hat_k_arrays(passes: ArrayLike, runs: ArrayLike, k: int) -> NDArray[np.float64]:
    """Vectorised pass^k; every row needs runs >= k."""
    k = _checks.positive_int("k", k)
    x, n = _count_arrays(passes, runs)
    if np.any(n < k):
        raise BadInputError("runs", int(n.min()), f"at least k = {k} runs per row")
    return comb(x, k, exact=False) / comb(n, k, exact=False)


def sign_test(differences: Sequence[float]) -> SignTest:
    """Exact one-sided sign test that the differences tend to be positive.

    ``p = P(Binomial(positive + negative, 1/2) >= positive)``; zero differences carry no sign and are
    dropped. With no non-zero difference there is no evidence either way: p = 1.
    """
    values = [float(d) for d in differences]
    if any(np.isnan(d) for d in values):
        raise BadInputError("differences", values, "numbers without NaN")
    positive = sum(d > 0 for d in values)
    negative = sum(d < 0 for d in values)
    ties = len(values) - positive - negative
    p_value = sign_test_p(positive, negative)
    return SignTest(positive=positive, negative=negative, ties=ties, p_value=p_value)


def sign_test_p(positive: int, negative: int) -> float:
    """One-sided sign-test p-value from the two counts (shared by the test and its exact DP)."""
    if positive == 0:
        return 1.0  # P(X >= 0) for any number of trials, including none
    return float(bdtrc(positive - 1, positive + negative, 0.5))


def binomial_pmf(n: int, p: float) -> NDArray[np.float64]:
    """P(X = k) for k = 0..n, X ~ Binomial(n, p), p in [0, 1].

    In log space so that large n cannot overflow the coefficient; ``xlogy`` makes 0^0 = 1, which
    gives the exact point masses at p = 0 and p = 1.
    """
    k = np.arange(n + 1)
    log = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + xlogy(k, p) + xlog1py(n - k, -p)
    return np.exp(log)


def _count_arrays(passes: ArrayLike, runs: ArrayLike) -> tuple[NDArray[np.float64], ...]:
    x = np.asarray(passes, dtype=float)
    n = np.asarray(runs, dtype=float)
    if np.any(n < 1) or np.any(n != np.floor(n)):
        raise BadInputError("runs", np.asarray(runs).tolist(), "integers >= 1")
    if np.any(x < 0) or np.any(x > n) or np.any(x != np.floor(x)):
        raise BadInputError("passes", np.asarray(passes).tolist(), "integers between 0 and runs")
    return np.broadcast_arrays(x, n)
