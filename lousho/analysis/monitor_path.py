"""The monitor's path for one applied edit (seed §4.3): the statistics at every run count both sides reached.

The monitor decides only at its looks (``monitor.decide``), on the first ``n`` runs of each side; the
path between the looks shows how the evidence grew. The page draws it as SVG and ``lousho plot monitor``
as a PNG, both from this one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from lousho.analysis.monitor import MonitorConfig
from lousho.analysis.stats import pooled_z_arrays


@dataclass(frozen=True)
class PathPoint:
    """The statistics on the first ``n`` runs of each side; ``crosses``: a look that rolls back."""

    n: int
    base_passes: int
    applied_passes: int
    z: float
    crosses: bool = False

    @property
    def drop(self) -> float:
        return (self.base_passes - self.applied_passes) / self.n


@dataclass(frozen=True)
class MonitorPath:
    """The runs the monitor reads for an edit, pass/fail oldest first, as ``Monitor.outcomes`` gives them:
    probe and unscored runs left out, the base capped at the last look's runs before the apply."""

    base: tuple[bool, ...]
    applied: tuple[bool, ...]
    config: MonitorConfig = field(default_factory=MonitorConfig)

    @property
    def base_runs(self) -> int:
        return len(self.base)

    @property
    def applied_runs(self) -> int:
        return len(self.applied)

    @property
    def paired(self) -> int:
        """Run counts both sides have reached: the z path's length."""
        return min(len(self.base), len(self.applied))

    def z(self) -> NDArray[np.float64]:
        """The pooled z (base minus applied) on cumulative counts at n = 1 .. ``paired`` runs per side."""
        n = np.arange(1, self.paired + 1)
        base = np.cumsum(self.base[: self.paired])
        applied = np.cumsum(self.applied[: self.paired])
        return pooled_z_arrays(base, n, applied, n)

    @cached_property
    def points(self) -> tuple[PathPoint, ...]:
        """Every run count up to the last look (the monitor never reads further)."""
        boundary = self.config.boundary
        count = min(self.paired, boundary.looks[-1])
        base = np.cumsum(self.base[:count], dtype=int)
        applied = np.cumsum(self.applied[:count], dtype=int)
        looks = {n: k for k, n in enumerate(boundary.looks)}
        return tuple(
            PathPoint(n, int(xb), int(xa), float(z), n in looks and bool(boundary.stops(looks[n], xb, xa)))
            for n, xb, xa, z in zip(range(1, count + 1), base, applied, self.z()[:count], strict=True))

    def at_looks(self) -> list[PathPoint]:
        looks = set(self.config.boundary.looks)
        return [p for p in self.points if p.n in looks]

    def conclusion(self) -> str:
        """What the rule says on these runs: the first look that rolls back, a keep, or the next look."""
        looks = self.config.boundary.looks
        reached = self.at_looks()
        for k, point in enumerate(reached):
            if point.crosses:
                return (f"roll back at the look at {point.n} runs per side: drop {point.drop:+.3f}, "
                        f"z {point.z:.2f} >= {self.config.boundary.z[k]}")
        if reached and reached[-1].n == looks[-1]:
            return f"keep: no look crossed the boundary by the last look ({looks[-1]} runs per side)"
        upcoming = next(n for n in looks if not reached or n > reached[-1].n)
        if self.base_runs < upcoming:
            # The base side is closed at the apply: no later run can fill it.
            return (f"the look at {upcoming} runs per side cannot be reached: the base revision has only "
                    f"{self.base_runs} scored runs before the apply (the monitor keeps it unverified at its "
                    "maximum age)")
        return (f"waiting for the look at {upcoming} runs per side (base {self.base_runs}, "
                f"applied {self.applied_runs} so far)")
