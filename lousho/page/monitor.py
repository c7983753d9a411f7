"""The live monitor's path for one applied edit: the cumulative pooled z at every run count, and the looks.

The page draws what the seeds' monitor (seed §4.3) sees: base runs (the revision before the edit,
before the apply) against applied runs (the edit's revision, from the apply on), compared on the
first ``n`` runs of each side. It decides only at the looks, 20, 40 and 60 runs per side: roll back
when the pass rate dropped by more than 0.05 and z >= 2.1. Computed here (observe imports no other
part of lousho), with the same formula as ``lousho.analysis.stats.pooled_z``: z = 0 when both sides
all pass or all fail, which is no evidence of a drop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LOOKS = (20, 40, 60)
BOUNDARY_Z = 2.1
MIN_DROP = 0.05
# Counts sit on a lattice: "drop > 0.05" and "z >= 2.1" must mean exactly that at the boundary
# (1.00 - 0.95 is 0.0500000000000000444 in floats), as in analysis' boundaries.
_EPS = 1e-9


@dataclass(frozen=True)
class Point:
    """The statistics on the first ``n`` runs of each side."""

    n: int
    base_passes: int
    applied_passes: int
    z: float

    @property
    def drop(self) -> float:
        return (self.base_passes - self.applied_passes) / self.n

    @property
    def crosses(self) -> bool:
        return self.z >= BOUNDARY_Z - _EPS and self.drop > MIN_DROP + _EPS


@dataclass(frozen=True)
class MonitorPath:
    base_runs: int
    applied_runs: int
    points: tuple[Point, ...]

    def at_looks(self) -> list[Point]:
        return [p for p in self.points if p.n in LOOKS]

    def conclusion(self) -> str:
        """What the rule says on these runs: the first look that rolls back, a keep, or the next look."""
        for point in self.at_looks():
            if point.crosses:
                return (f"roll back at the look at {point.n} runs per side: drop {point.drop:+.3f}, "
                        f"z {point.z:.2f} >= {BOUNDARY_Z}")
        reached = self.at_looks()
        if reached and reached[-1].n == LOOKS[-1]:
            return f"keep: no look crossed the boundary by the last look ({LOOKS[-1]} runs per side)"
        upcoming = next(n for n in LOOKS if not reached or n > reached[-1].n)
        if self.base_runs < upcoming:
            # The base side is closed at the apply: no later run can fill it.
            return (f"the look at {upcoming} runs per side cannot be reached: the base revision has only "
                    f"{self.base_runs} scored runs before the apply (the monitor keeps it unverified at its "
                    "maximum age)")
        return (f"waiting for the look at {upcoming} runs per side (base {self.base_runs}, "
                f"applied {self.applied_runs} so far)")


def pooled_z(base_passes: int, applied_passes: int, n: int) -> float:
    """Base minus applied over the pooled standard error, ``n`` runs per side."""
    pooled = (base_passes + applied_passes) / (2 * n)
    se = math.sqrt(pooled * (1 - pooled) * (2 / n))
    return (base_passes - applied_passes) / n / se if se > 0 else 0.0


def monitor_path(base: Sequence[bool], applied: Sequence[bool]) -> MonitorPath:
    """``base``: the newest base runs before the apply (at most the last look's count), oldest first;
    ``applied``: the applied revision's runs from the apply on, oldest first. Unscored runs are not in
    either: they carry no evidence."""
    points = []
    xb = xa = 0
    for n in range(1, min(len(base), len(applied), LOOKS[-1]) + 1):
        xb += bool(base[n - 1])
        xa += bool(applied[n - 1])
        points.append(Point(n, xb, xa, pooled_z(xb, xa, n)))
    return MonitorPath(len(base), len(applied), tuple(points))
