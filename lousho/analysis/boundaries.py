"""Monitor boundaries: the seeds' rule and the group-sequential alternatives, as z per look.

Every rule here is one-sided (it only ever rolls back on a *drop*) and has no futility boundary:
the monitor keeps an edit by running out of looks, not by crossing a lower bound.

* ``seed``: the source documents' rule (seed §4.3): roll back at a look when the pass-rate drop is
  over 0.05 and the pooled z on cumulative counts is at least 2.1, at 20, 40 and 60 runs per side.
* ``pocock``: one constant boundary with overall one-sided level alpha (Pocock 1977).
* ``obf``: O'Brien–Fleming, ``z_k = C * sqrt(t_K / t_k)`` with overall level alpha (1979).
* ``spending``: Lan–DeMets with the O'Brien–Fleming-type spending function
  ``alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))``; ``spending-pocock`` with the Pocock-type
  ``alpha * ln(1 + (e - 1) t)`` (Lan & DeMets 1983; formulas as in gsDesign's sfLDOF / sfLDPocock).
  Spending allows unequal or unplanned looks: each look spends by its share of the planned horizon.

Boundaries come from the canonical joint normal (``_normal``); the exact binomial error rates of a
boundary applied to pass/fail counts are in ``operating``. Information is proportional to runs per
side, so look k sits at ``t_k = n_k / horizon``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtr, ndtri

from lousho.analysis import _checks, _normal
from lousho.analysis._names import RULES
from lousho.analysis.errors import BadInputError, BoundaryError
from lousho.analysis.stats import pooled_z_arrays
from lousho.kernel import monitor_rule

# The seeds' numbers (seed §4.3), defined once for analysis, the daemon's trigger and the page.
SEED_LOOKS = monitor_rule.LOOKS
SEED_Z = monitor_rule.Z
SEED_MIN_DROP = monitor_rule.MIN_DROP
_EPS = monitor_rule.EPS


@dataclass(frozen=True)
class Boundary:
    """Where a rule rolls back: ``z[k]`` at ``looks[k]`` runs per side, and a drop over ``min_drop``.

    ``alpha`` is the nominal one-sided level under the normal model (``None`` for the seed rule,
    whose level is whatever 2.1 gives). ``z[k]`` may be ``inf``: the look cannot stop.
    """

    rule: str
    looks: tuple[int, ...]
    z: tuple[float, ...]
    alpha: float | None
    min_drop: float

    def stops(self, look: int, base_passes: ArrayLike, applied_passes: ArrayLike) -> NDArray[np.bool_]:
        """Whether the counts at look index ``look`` (both sides at ``looks[look]`` runs) roll back.

        The monitor and the exact DP both call this, so they cannot disagree on the region; it is
        ``monitor_rule.rolls_back`` over arrays of counts, at this boundary's z.
        """
        n = self.looks[look]
        xb = np.asarray(base_passes, dtype=float)
        xa = np.asarray(applied_passes, dtype=float)
        z = pooled_z_arrays(xb, n, xa, n)
        return (z >= self.z[look] - _EPS) & (xb - xa > self.min_drop * n + _EPS)

    def normal_crossing(self, drift: float = 0.0) -> NDArray[np.float64]:
        """P(first crossing at each look) under the normal model, ignoring ``min_drop``.

        ``drift`` is the mean of Z at the last look (0 under no change).
        """
        return _normal.crossing_probabilities(self.z, _fractions(self.looks, None), drift)


def make_boundary(
    rule: str,
    looks: Sequence[int] = SEED_LOOKS,
    alpha: float | None = None,
    *,
    z: float = SEED_Z,
    min_drop: float = SEED_MIN_DROP,
    horizon: int | None = None,
) -> Boundary:
    """The boundary of ``rule`` at ``looks``.

    ``alpha`` (default 0.05) applies to every rule but ``seed``, whose level is fixed by ``z``;
    passing one with ``seed`` is an error rather than silently ignored. ``horizon`` (spending rules
    only; default the last look) is the planned maximum runs per side.
    """
    planned = _checks.looks(looks)
    if rule not in RULES:
        raise BadInputError("rule", rule, "one of " + ", ".join(RULES))
    if _checks.non_negative("min_drop", min_drop) >= 1.0:
        raise BadInputError("min_drop", min_drop, "a number in [0, 1)")
    if rule == "seed":
        if alpha is not None:
            raise BadInputError(
                "alpha",
                alpha,
                "no alpha with the seed rule",
                hint="the seed rule is fixed at z >= 2.1; use rule pocock, obf or spending to set alpha",
            )
        if not math.isfinite(_checks.non_negative("z", z)) or z <= 0:
            raise BadInputError("z", z, "a positive number")
        return Boundary("seed", planned, (float(z),) * len(planned), None, float(min_drop))
    level = _checks.alpha(0.05 if alpha is None else alpha)
    if horizon is not None and rule not in ("spending", "spending-pocock"):
        raise BadInputError("horizon", horizon, "no horizon: only spending rules take one")
    if rule == "pocock":
        bounds = pocock(planned, level)
    elif rule == "obf":
        bounds = obrien_fleming(planned, level)
    else:
        bounds = lan_demets(planned, level, rule, horizon)
    return Boundary(rule, planned, bounds, level, float(min_drop))


@lru_cache(maxsize=256)
def pocock(looks: tuple[int, ...], alpha: float) -> tuple[float, ...]:
    """The constant c with P(max_k Z_k >= c) = alpha under no change."""
    fractions = _fractions(looks, None)

    def excess(c: float) -> float:
        return float(_normal.crossing_probabilities([c] * len(looks), fractions).sum()) - alpha

    c = _solve("pocock", excess, *_bracket(alpha, len(looks)))
    return (c,) * len(looks)


@lru_cache(maxsize=256)
def obrien_fleming(looks: tuple[int, ...], alpha: float) -> tuple[float, ...]:
    """``z_k = C / sqrt(t_k)`` with C solved for overall level alpha."""
    fractions = _fractions(looks, None)
    shape = [1.0 / math.sqrt(t) for t in fractions]

    def excess(c: float) -> float:
        return float(_normal.crossing_probabilities([c * s for s in shape], fractions).sum()) - alpha

    c = _solve("obf", excess, *_bracket(alpha, len(looks)))
    return tuple(c * s for s in shape)


@lru_cache(maxsize=256)
def lan_demets(
    looks: tuple[int, ...], alpha: float, kind: str = "spending", horizon: int | None = None
) -> tuple[float, ...]:
    """Lan–DeMets boundaries: look k spends ``alpha(t_k) - alpha(t_{k-1})`` of the level.

    Solved look by look on the surviving sub-density, so each look needs only a 1-D root.
    """
    if horizon is not None and (isinstance(horizon, bool) or horizon < looks[-1]):
        raise BadInputError("horizon", horizon, f"runs per side >= the last look ({looks[-1]})")
    spend = _spending_function(kind, alpha)
    fractions = _fractions(looks, horizon)
    state = _normal.start()
    spent = 0.0
    bounds: list[float] = []
    for k, t in enumerate(fractions):
        target = spend(t) - spent
        spent = spend(t)
        bound = _spent_bound(kind, state, t, target)
        bounds.append(bound)
        if k + 1 < len(fractions):
            state = _normal.advance(state, bound, t, fractions[k + 1])
    return tuple(bounds)


def _spent_bound(kind: str, state: _normal.State, t: float, target: float) -> float:
    """The z at information t whose crossing, given the surviving mass, spends exactly ``target``."""
    if target <= 0.0:
        return math.inf  # nothing to spend at this look: it cannot stop

    def excess(z: float) -> float:
        return _normal.cross(state, z, t) - target

    return _solve(kind, excess, -20.0, 40.0)


def spending_obf(alpha: float) -> Callable[[float], float]:
    """O'Brien–Fleming-type spending: almost nothing early, most of alpha at the end."""
    z = _isf(alpha / 2.0)
    return lambda t: float(2.0 * ndtr(-z / math.sqrt(t))) if t > 0 else 0.0


def spending_pocock(alpha: float) -> Callable[[float], float]:
    """Pocock-type spending: close to even across equally spaced looks."""
    return lambda t: alpha * math.log(1.0 + (math.e - 1.0) * t)


def _spending_function(kind: str, alpha: float) -> Callable[[float], float]:
    if kind == "spending":
        return spending_obf(alpha)
    if kind == "spending-pocock":
        return spending_pocock(alpha)
    raise BadInputError("rule", kind, "spending or spending-pocock")


def _fractions(looks: Sequence[int], horizon: int | None) -> list[float]:
    end = looks[-1] if horizon is None else horizon
    return [n / end for n in looks]


def _bracket(alpha: float, count: int) -> tuple[float, float]:
    # The last look alone crosses less often than all looks: c >= isf(alpha). Bonferroni: each look
    # crosses at most sf(c), so c = isf(alpha / K) is at or above the root.
    return _isf(alpha), _isf(alpha / count)


def _isf(tail: float) -> float:
    """The standard normal z with P(Z >= z) = tail."""
    return float(-ndtri(tail))


def _solve(rule: str, excess: Callable[[float], float], low: float, high: float) -> float:
    if low == high:
        return low
    f_low, f_high = excess(low), excess(high)
    if f_low == 0.0:
        return low
    if f_low * f_high > 0:
        raise BoundaryError(rule, f"the error rate does not cross its target on [{low}, {high}]")
    # Imported here: scipy.optimize costs most of a second to import, and the seed rule never
    # solves for a boundary, so `lousho stats monitor` with the default rule does not pay for it.
    from scipy.optimize import brentq

    return float(brentq(excess, low, high, xtol=1e-10))
