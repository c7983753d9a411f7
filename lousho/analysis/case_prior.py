"""Per-case pass rates from a few runs each, by empirical Bayes: what the gates' recorded rates assume where
they need rates at all.

The false-accept rates of both gates are taken given each case's pooled passes over both sides (under no
effect the split is hypergeometric whatever the rate), so they need no rates, except the paired test's
stage 2, whose totals are yet to come: those are drawn at rates from posteriors fitted to the pooled stage-1
runs. The power row and the held-out rates need the base's own rates, from its 3 runs a case. Plugging in
each case's own estimate, (x + 1/2)/(n + 1), puts every case seen 3 of 3 at 0.875, so a case that never fails
gets a real chance to come out "worse", and the error rates are far from linear in the rates: the plug-in
figure is biased (the seeds' false-accept rate 2.5-2.8 times too low on mixed cases, the paired one 9-25%
high). Instead the cases are taken as exchangeable draws from one Beta(a, b), fitted by maximum marginal
likelihood of the beta-binomial over all the cases, and each case's rate is integrated over its posterior
Beta(a + x, b + n - x): ``expect`` exactly, by Gauss-Jacobi quadrature, for a rule whose rate is a product
over cases; ``draws`` by Monte Carlo otherwise. From 3 base runs a case this still ran 30% low for the seeds'
rule on clustered cases (``tests/analysis/test_recorded_rates``), which is why the false-accept rates no
longer rest on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import minimize
from scipy.special import betaln, digamma, expit, roots_jacobi

# The prior's concentration a + b is kept in [0.2, 1000]: at 1000 every case shares one rate (the data
# look homogeneous), below 0.2 the prior is two point masses at 0 and 1 and the fit is flat anyway.
CONCENTRATION = (0.2, 1000.0)
# 16 nodes integrate a polynomial of degree 31 exactly: every rule here is of degree at most 12 in a rate.
NODES = 16
# Below 3 cases a prior's spread cannot be fitted (one case's fit is a point mass at its own rate), so each
# case gets Jeffreys' Beta(1/2, 1/2), whose posterior mean is the plug-in's (x + 1/2)/(n + 1).
MIN_CASES = 3
JEFFREYS = (0.5, 0.5)


@dataclass(frozen=True)
class CasePosteriors:
    """Each case's posterior Beta(a[i], b[i]) under the fitted prior Beta(prior_a, prior_b)."""

    a: NDArray[np.float64]
    b: NDArray[np.float64]
    prior_a: float
    prior_b: float
    fitted: bool = True  # False: Jeffreys' prior, too few cases to fit one

    @property
    def means(self) -> list[float]:
        return (self.a / (self.a + self.b)).tolist()

    def expect(self, rate: Callable[[NDArray[np.float64]], NDArray[np.float64]]) -> NDArray[np.float64]:
        """Per case, E[rate(p)] over its posterior, by Gauss-Jacobi quadrature (exact for a polynomial rate).

        ``rate`` maps an array of rates to an array of values, elementwise, and is called once.
        """
        # Cases with the same passes of the same runs share a posterior: with 3 runs there are at most 4.
        pairs, inverse = np.unique(np.stack([self.a, self.b], axis=1), axis=0, return_inverse=True)
        nodes, weights = (np.array(side) for side in zip(*(_nodes(a, b) for a, b in pairs), strict=True))
        values = np.asarray(rate(nodes.ravel()), dtype=float).reshape(nodes.shape)
        return (values * weights).sum(axis=1)[inverse.reshape(-1)]

    def first(self) -> CasePosteriors:
        return CasePosteriors(self.a[:1], self.b[:1], self.prior_a, self.prior_b, self.fitted)

    def draws(self, replicates: int, seed: int) -> NDArray[np.float64]:
        """Per-case rates drawn from the posteriors, one row per replicate (replicates x cases)."""
        rng = np.random.default_rng(seed)
        return rng.beta(self.a, self.b, (replicates, self.a.size))

    def describe(self, runs: str = "the base's gate runs") -> str:
        """What the posteriors assume, ``runs`` naming the runs they were fitted to (both sides' under no effect)."""
        shown = ", ".join(f"{p:.2f}" for p in self.means[:12]) + (", ..." if self.a.size > 12 else "")
        prior = (f"cases exchangeable, their rates from Beta({self.prior_a:.2f}, {self.prior_b:.2f}) fitted by "
                 f"maximum marginal likelihood to {runs}" if self.fitted else
                 f"each case's rate from Jeffreys' Beta(1/2, 1/2) (fewer than {MIN_CASES} cases to fit a prior)")
        return (f"{prior}; each case's rate averaged over its posterior given its runs (per-case rates "
                f"[{shown}] as posterior means)")


def posteriors(passes: Sequence[int], runs: Sequence[int]) -> CasePosteriors:
    """Fit the prior to every case's (passes, runs), then each case's posterior. No cases: one at Jeffreys'."""
    x, n = np.asarray(passes, dtype=float), np.asarray(runs, dtype=float)
    if x.size == 0:
        x, n = np.zeros(1), np.zeros(1)
    fitted = bool(x.size >= MIN_CASES and n.sum() > 0)
    a, b = _fitted(tuple(sorted(zip(x.tolist(), n.tolist(), strict=True)))) if fitted else JEFFREYS
    return CasePosteriors(a + x, b + n - x, a, b, fitted)


@lru_cache(maxsize=1024)
def _fitted(cases: tuple[tuple[float, float], ...]) -> tuple[float, float]:
    """``fit_prior`` by the multiset of (passes, runs), all it depends on: every candidate a step gates is
    set against the same base runs, so their posteriors are fitted once."""
    x, n = np.array(cases, dtype=float).T
    return fit_prior(x, n)


def fit_prior(x: NDArray[np.float64], n: NDArray[np.float64]) -> tuple[float, float]:
    """Beta(a, b) maximising the beta-binomial likelihood of the cases, over mean and log concentration.

    A grid first (the likelihood can have a ridge and a boundary optimum, where one local start gets stuck),
    then one bounded local search from the grid's best point. Cases with equal (passes, runs) are counted once.
    """
    pairs, weight = np.unique(np.stack([x, n], axis=1), axis=0, return_counts=True)
    px, pn = pairs[:, 0], pairs[:, 1]
    bounds = [(-8.0, 8.0), (float(np.log(CONCENTRATION[0])), float(np.log(CONCENTRATION[1])))]

    def loss(theta: NDArray[np.float64]) -> NDArray[np.float64]:
        a, b = _ab(theta)
        return -np.sum(weight * (betaln(a[..., None] + px, b[..., None] + pn - px) - betaln(a, b)[..., None]),
                       axis=-1)

    def loss_and_gradient(theta: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        # By hand, not by finite differences: a decision fits a prior per call and this is most of its time.
        a, b = _ab(theta)
        da = np.sum(weight * (digamma(a + px) - digamma(a + b + pn) - digamma(a) + digamma(a + b)))
        db = np.sum(weight * (digamma(b + pn - px) - digamma(a + b + pn) - digamma(b) + digamma(a + b)))
        # a = mean c, b = (1 - mean) c: d/d logit(mean) = c mean (1 - mean) (da - db), d/d log c = a da + b db.
        spread = a * b / (a + b)
        return float(loss(theta)), -np.array([spread * (da - db), a * da + b * db])

    grid = np.stack(np.meshgrid(np.linspace(*bounds[0], 65), np.linspace(*bounds[1], 33)), axis=-1).reshape(-1, 2)
    start = grid[np.argmin(loss(grid.T))]
    best = minimize(loss_and_gradient, start, jac=True, method="L-BFGS-B", bounds=bounds)
    a, b = _ab(best.x if best.fun <= float(loss(start)) else start)
    return float(a), float(b)


def _ab(theta: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(a, b) from (logit of the mean, log of the concentration a + b), elementwise."""
    mean, concentration = expit(theta[0]), np.exp(theta[1])
    return mean * concentration, (1.0 - mean) * concentration


@lru_cache(maxsize=4096)  # a case's posterior is one of a few (passes, runs) under a cached prior
def _nodes(a: float, b: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Nodes and weights on [0, 1] for the Beta(a, b) law: Jacobi's weight (1 - t)^(b-1) (1 + t)^(a-1)."""
    t, w = roots_jacobi(NODES, b - 1.0, a - 1.0)
    return np.clip((t + 1.0) / 2.0, 0.0, 1.0), w / w.sum()
