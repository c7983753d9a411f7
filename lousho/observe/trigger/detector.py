"""The regression detector: the seeds' monitor rule (seed §4.3) on a registered agent's live scored runs,
oldest first. Pure: the watcher (``cycle.py``) reads the runs and starts the cycle when it fires."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lousho.kernel import monitor_rule

# The seeds' monitor numbers (seed §4.3): the first look's 20 runs per side, a drop over 0.05 at z >= 2.1.
WINDOW = monitor_rule.LOOKS[0]
MIN_DROP = monitor_rule.MIN_DROP
Z_MIN = monitor_rule.Z


@dataclass(frozen=True)
class Window:
    """The rule's view of the last ``2 * size`` scored runs: passes before and in the recent window."""

    size: int
    before_passes: int
    recent_passes: int
    z: float | None
    regressed: bool

    def describe(self) -> str:
        z = "undefined" if self.z is None else f"{self.z:.2f}"
        return (f"pass rate {self.before_passes}/{self.size} -> {self.recent_passes}/{self.size} "
                f"over the last {2 * self.size} scored runs (z={z})")


def judge(outcomes: Sequence[bool], *, window: int = WINDOW, min_drop: float = MIN_DROP,
          z_min: float = Z_MIN) -> Window | None:
    """The seeds' monitor rule on outcomes oldest first: the newest ``window`` against the ``window``
    before them. None below ``2 * window`` outcomes. A regression is a pass-rate drop over
    ``min_drop`` with the pooled two-proportion z at least ``z_min``; an undefined z (both windows
    all pass or all fail) is no evidence of a drop."""
    if len(outcomes) < 2 * window:
        return None
    before = sum(bool(o) for o in outcomes[-2 * window:-window])
    recent = sum(bool(o) for o in outcomes[-window:])
    # Both windows all pass or all fail: z is undefined (the rule reads it as 0, no evidence of a drop).
    z = None if before + recent in (0, 2 * window) else monitor_rule.pooled_z(before, window, recent, window)
    return Window(window, before, recent, z, monitor_rule.rolls_back(before, recent, window, z=z_min,
                                                                     min_drop=min_drop))
