"""The monitor's path for one applied edit (seed §4.3): the design's statistic at every run count up to the last look.

The monitor decides only at its looks (``monitor.decide``); the path between them shows how the evidence grew.
It is the statistic of the design that decides (``monitor.statistic_path``): the session-clustered z of the
held-back base against the edit (``concurrent``), the case-stratified z against the base runs nearest before the
apply (``stratified``), or the pooled z of the seeds' rule (``seed``), on the arms ``Monitor.arms()`` reads, so
at every look the drawn point is the decision's z. The page draws it as SVG and ``lousho plot monitor`` as a
PNG, both from this one definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from lousho.analysis.monitor import Arm, MonitorConfig, PathPoint, compared_outcomes, statistic_path

__all__ = ["MonitorPath", "PathPoint"]

# What each design compares, for a conclusion, an axis and a legend.
_STATISTICS = {
    "concurrent": "session-clustered z (held-back base − applied)",
    "stratified": "case-stratified z, session-clustered (base before − applied)",
    "seed": "pooled z (base before − applied)",
}


@dataclass(frozen=True)
class MonitorPath:
    """The arms the monitor compares for an edit, oldest first, and the config that decides on them.

    ``base`` and ``applied`` are ``Arm``s as ``Monitor.arms()`` reads them (``of_arms`` takes that triple), or
    plain pass/fail booleans for a caller with outcomes only (runs in sessions of one, compared run for run; with
    ``MonitorConfig(design="seed")`` the path is the seeds' pooled z). ``config.design`` is the design whose
    statistic is drawn and whose rule concludes.
    """

    base: Arm
    applied: Arm
    config: MonitorConfig = field(default_factory=MonitorConfig)

    def __post_init__(self) -> None:
        # Frozen: booleans become arms once, here, so every property reads one kind of input.
        object.__setattr__(self, "base", Arm.of(self.base, "base"))
        object.__setattr__(self, "applied", Arm.of(self.applied, "applied"))

    @classmethod
    def of_arms(cls, arms: tuple[str, Arm, Arm], config: MonitorConfig | None = None) -> MonitorPath:
        """From ``Monitor.arms()``: (the design the watch runs in, the base arm, the applied arm). The design may
        differ from the config's (a concurrent watch with no held-back run falls back to stratified), as it
        does in ``Monitor.check``."""
        design, base, applied = arms
        config = config or MonitorConfig()
        return cls(base, applied, config if design == config.design else replace(config, design=design))

    @classmethod
    def of_outcomes(cls, base: Sequence[bool], applied: Sequence[bool],
                    config: MonitorConfig | None = None) -> MonitorPath:
        """From pass/fail outcomes only: the seeds' design unless ``config`` names another."""
        return cls(Arm.of(base, "base"), Arm.of(applied, "applied"), config or MonitorConfig(design="seed"))

    @property
    def design(self) -> str:
        return self.config.design

    @property
    def design_label(self) -> str:
        """The design in a few words, as a conclusion names it."""
        if self.design == "concurrent":
            return f"concurrent: {self.config.holdback:.0%} of sessions held back"
        if self.design == "stratified":
            return "stratified by case: the base runs nearest before the apply"
        return "seed: pooled z, the base runs before the apply"

    @property
    def statistic(self) -> str:
        """The statistic drawn, for an axis or a legend."""
        return _STATISTICS[self.design]

    @property
    def run_axis(self) -> str:
        """What a point's run count counts."""
        if self.design == "concurrent":
            return "held-back base runs (against the edit's runs up to the same moment)"
        return "runs per side"

    @cached_property
    def outcomes(self) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
        """Each arm's 0/1 outcomes as the design compares them (``monitor.compared_outcomes``)."""
        return compared_outcomes(self.config, self.base, self.applied)

    @property
    def base_runs(self) -> int:
        return len(self.outcomes[0])

    @property
    def applied_runs(self) -> int:
        return len(self.outcomes[1])

    @cached_property
    def points(self) -> tuple[PathPoint, ...]:
        """Every run count up to the last look that the arms reached (the monitor never reads further)."""
        return statistic_path(self.config, self.base, self.applied)

    def z(self) -> NDArray[np.float64]:
        return np.array([p.z for p in self.points], dtype=float)

    def at_looks(self) -> list[PathPoint]:
        return [p for p in self.points if p.look is not None]

    @property
    def action(self) -> str:
        """``rollback`` at the first look that crosses, ``keep`` once the last look is reached, else ``continue``:
        ``decide``'s action on these arms before its maximum age."""
        reached = self.at_looks()
        if any(p.crosses for p in reached):
            return "rollback"
        return "keep" if reached and reached[-1].n == self.config.looks[-1] else "continue"

    def conclusion(self) -> str:
        """What the rule says on these runs, and the design that says it: the first look that rolls back, a
        keep, or the next look."""
        return f"{self._what()} [{self.design_label}]"

    def _what(self) -> str:
        boundary, looks = self.config.boundary, self.config.looks
        reached = self.at_looks()
        crossed = next((p for p in reached if p.crosses), None)
        if crossed is not None:
            return (f"roll back at the look at {self._runs(crossed.n, crossed.applied_runs)}: drop "
                    f"{crossed.drop:+.3f}, z {crossed.z:.2f} >= {boundary.z[crossed.look - 1]:.2f}")
        if reached and reached[-1].n == looks[-1]:
            return f"keep: no look crossed the boundary by the last look ({self._runs(looks[-1])})"
        upcoming = next(n for n in looks if not reached or n > reached[-1].n)
        if self.design != "concurrent" and self.base_runs < upcoming:
            # The base side is closed at the apply: no later run can fill it.
            return (f"the look at {upcoming} runs per side cannot be reached: the base revision has only "
                    f"{self.base_runs} runs before the apply (the monitor keeps the edit unverified at its "
                    "maximum age)")
        return (f"waiting for the look at {self._runs(upcoming)} (base {self.base_runs}, "
                f"applied {self.applied_runs} so far)")

    def _runs(self, n: int, applied: int | None = None) -> str:
        if self.design != "concurrent":
            return f"{n} runs per side"
        return f"{n} held-back runs" + (f" against {applied} of the edit" if applied is not None else "")
