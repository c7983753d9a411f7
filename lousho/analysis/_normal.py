"""Crossing probabilities of upper boundaries by the canonical joint normal, by numerical integration.

The standardised statistics at looks with information fractions t_1 < ... < t_K are
``Z_k = B(t_k) / sqrt(t_k)`` for a Brownian motion ``B`` with drift ``theta`` (so
``corr(Z_i, Z_j) = sqrt(t_i / t_j)``, Jennison & Turnbull 2000, ch. 3). We carry the sub-density of
``B(t_k)`` on the continuation region from look to look on a Simpson grid (their ch. 19 recursion).
Deterministic and smooth in the boundary, so a root finder on it converges cleanly, unlike the
randomised quasi-Monte Carlo of ``scipy.stats.multivariate_normal.cdf``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr

# Mass beyond 8.5 standard deviations is below 1e-16: the grid ignores it.
_TAILS = 8.5
# Grid step as a fraction of the narrowest Gaussian kernel it meets; Simpson's error is ~(1/10)^4.
_STEPS_PER_SD = 10
_MAX_POINTS = 3001
_SQRT_2PI = math.sqrt(2.0 * math.pi)


@dataclass(frozen=True)
class State:
    """Surviving mass: points of B(t) and the Simpson-weighted sub-density at each."""

    t: float
    x: NDArray[np.float64]
    mass: NDArray[np.float64]


def start() -> State:
    """B(0) = 0 with probability one: a point mass, so look 1 needs no special case."""
    return State(t=0.0, x=np.zeros(1), mass=np.ones(1))


def cross(state: State, z: float, t: float, drift: float = 0.0) -> float:
    """P(still running after the last look, and Z >= z at the look at information t)."""
    if state.mass.size == 0 or z == math.inf:
        return 0.0
    if z == -math.inf:
        return float(state.mass.sum())
    delta = t - state.t
    scale = math.sqrt(delta)
    upper = z * math.sqrt(t)
    return float(state.mass @ ndtr((state.x + drift * delta - upper) / scale))


def advance(
    state: State, z: float, t: float, next_t: float | None, drift: float = 0.0
) -> State:
    """The surviving sub-density at information t, on a grid ending exactly at the boundary.

    Ending the grid at the boundary keeps the integrand smooth on it, which Simpson needs.
    ``next_t`` sets the step: the next look's kernel must be resolved too.
    """
    delta = t - state.t
    scale = math.sqrt(delta)
    low = drift * t - _TAILS * math.sqrt(t)
    high = drift * t + _TAILS * math.sqrt(t)
    if not math.isinf(z):
        high = min(high, z * math.sqrt(t))
    if high <= low or state.mass.size == 0:
        return State(t=t, x=np.zeros(0), mass=np.zeros(0))
    narrowest = scale if next_t is None else min(scale, math.sqrt(next_t - t))
    points = int(math.ceil((high - low) / narrowest * _STEPS_PER_SD))
    points = min(_MAX_POINTS, max(21, points + (1 - points % 2)))
    y = np.linspace(low, high, points)
    standard = (y[None, :] - state.x[:, None] - drift * delta) / scale
    kernel = np.exp(-0.5 * standard * standard) / (_SQRT_2PI * scale)
    density = state.mass @ kernel
    return State(t=t, x=y, mass=density * _simpson_weights(points, y[1] - y[0]))


def crossing_probabilities(
    z: Sequence[float], fractions: Sequence[float], drift: float = 0.0
) -> NDArray[np.float64]:
    """P(first crossing at look k), k = 1..K, for upper boundaries ``z`` at ``fractions``."""
    state = start()
    out = np.zeros(len(z))
    for k, (bound, t) in enumerate(zip(z, fractions, strict=True)):
        out[k] = cross(state, bound, t, drift)
        if k + 1 < len(z):
            state = advance(state, bound, t, fractions[k + 1], drift)
    return out


def _simpson_weights(points: int, step: float) -> NDArray[np.float64]:
    weights = np.ones(points)
    weights[1:-1:2] = 4.0
    weights[2:-1:2] = 2.0
    return weights * step / 3.0
