"""Exact operating characteristics of a monitor boundary on pass/fail counts, by dynamic programme.

Not simulation: ``grid[xb, xa]`` holds the probability of each pair of cumulative pass counts
(base, applied) among the paths that have not rolled back yet. Between looks it is convolved with
the binomial increments of both sides; at each look the mass in the boundary's stopping region
(``Boundary.stops``, the same predicate the monitor uses) is absorbed and counted. This is the method
of improve-anchors §3.7, so its figures are the check on this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from lousho.analysis import _checks
from lousho.analysis.boundaries import Boundary
from lousho.analysis.stats import binomial_pmf


@dataclass(frozen=True)
class MonitorCharacteristics:
    """Exact error rates of one boundary for a base pass rate ``p0`` and an applied rate ``p1``.

    ``false_alarm``: P(roll back) when both sides pass at ``p0``. ``power``: P(roll back) when the
    applied side passes at ``p1``. The ``*_by_look`` tuples are cumulative up to each look.
    ``expected_runs`` is the mean runs per side at the decision under ``p1`` (``_null``: under ``p0``),
    counting a run that never rolls back as the last look.
    """

    rule: str
    looks: tuple[int, ...]
    boundaries: tuple[float, ...]
    alpha: float | None
    min_drop: float
    p0: float
    p1: float
    false_alarm: float
    false_alarm_by_look: tuple[float, ...]
    power: float
    power_by_look: tuple[float, ...]
    expected_runs: float
    expected_runs_null: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready (an infinite boundary, a look that cannot stop, becomes ``None``)."""
        return {
            "rule": self.rule,
            "looks": list(self.looks),
            "boundaries": [z if np.isfinite(z) else None for z in self.boundaries],
            "alpha": self.alpha,
            "min_drop": self.min_drop,
            "p0": self.p0,
            "p1": self.p1,
            "false_alarm": self.false_alarm,
            "false_alarm_by_look": list(self.false_alarm_by_look),
            "power": self.power,
            "power_by_look": list(self.power_by_look),
            "expected_runs": self.expected_runs,
            "expected_runs_null": self.expected_runs_null,
        }


def monitor_characteristics(boundary: Boundary, p0: float, p1: float) -> MonitorCharacteristics:
    """False alarm at ``p0`` on both sides, power against base ``p0`` and applied ``p1``."""
    p0 = _checks.probability("p0", p0)
    p1 = _checks.probability("p1", p1)
    null = stopping_probabilities(boundary, p0, p0)
    alternative = stopping_probabilities(boundary, p0, p1)
    return MonitorCharacteristics(
        rule=boundary.rule,
        looks=boundary.looks,
        boundaries=boundary.z,
        alpha=boundary.alpha,
        min_drop=boundary.min_drop,
        p0=p0,
        p1=p1,
        false_alarm=float(null.sum()),
        false_alarm_by_look=tuple(float(v) for v in np.cumsum(null)),
        power=float(alternative.sum()),
        power_by_look=tuple(float(v) for v in np.cumsum(alternative)),
        expected_runs=expected_runs(boundary, alternative),
        expected_runs_null=expected_runs(boundary, null),
    )


@lru_cache(maxsize=1024)
def stopping_probabilities(
    boundary: Boundary, p_base: float, p_applied: float
) -> NDArray[np.float64]:
    """P(the first roll-back is at look k), k = 1..K, for true pass rates of the two sides."""
    p_base = _checks.unit_interval("p_base", p_base)
    p_applied = _checks.unit_interval("p_applied", p_applied)
    grid = np.ones((1, 1))
    previous = 0
    out = np.zeros(len(boundary.looks))
    for k, n in enumerate(boundary.looks):
        step = n - previous
        grid = _step(previous, step, p_base).T @ grid @ _step(previous, step, p_applied)
        xb, xa = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        stop = boundary.stops(k, xb, xa)
        out[k] = grid[stop].sum()
        grid[stop] = 0.0
        previous = n
    out.setflags(write=False)  # cached: callers share the array
    return out


def expected_runs(boundary: Boundary, stops: NDArray[np.float64]) -> float:
    """Mean runs per side at the decision, given the first-stop probabilities per look."""
    looks = np.asarray(boundary.looks, dtype=float)
    return float(stops @ looks + (1.0 - stops.sum()) * looks[-1])


def minimum_detectable_drop(boundary: Boundary, p0: float, power: float = 0.8) -> float | None:
    """The smallest drop ``p0 - p1`` caught with at least ``power`` by the last look.

    ``None`` when even an applied side that never passes is caught less often than that (the rule
    cannot reach that power at these looks). Power rises as ``p1`` falls, so bisection applies.
    """
    p0 = _checks.probability("p0", p0)
    target = _checks.probability("power", power)

    def shortfall(p1: float) -> float:
        return float(stopping_probabilities(boundary, p0, p1).sum()) - target

    floor = 1e-9
    if shortfall(floor) < 0:
        return None
    if shortfall(p0) >= 0:
        return 0.0
    from scipy.optimize import brentq  # slow to import; only this search needs it

    return p0 - float(brentq(shortfall, floor, p0, xtol=1e-6))


def _step(previous: int, step: int, p: float) -> NDArray[np.float64]:
    """Transition from ``previous + 1`` count states to ``previous + step + 1`` by Binomial(step, p)."""
    pmf = binomial_pmf(step, p)
    matrix = np.zeros((previous + 1, previous + step + 1))
    for i in range(previous + 1):
        matrix[i, i : i + step + 1] = pmf
    return matrix
