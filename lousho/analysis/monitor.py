"""The live monitor's decision core (seed §4.3): pure, over pass/fail sequences, no store access.

It compares real runs of the applied revision with runs of the revision before it and decides only
at planned looks, on cumulative counts: at look k both sides must have ``looks[k]`` runs, and the
decision uses the *first* ``looks[k]`` runs of each side, never the ones after. So the same runs give
the same decision however often it is asked, and runs arriving between looks change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Literal

import numpy as np

from lousho.analysis import _checks
from lousho.analysis.boundaries import SEED_LOOKS, SEED_MIN_DROP, SEED_Z, Boundary, make_boundary
from lousho.analysis.errors import BadInputError
from lousho.analysis.operating import stopping_probabilities
from lousho.analysis.stats import pooled_z

Action = Literal["continue", "rollback", "keep", "kept-unverified"]

# Error rates are stated at the base's observed pass rate, kept off 0 and 1 where every rule is
# degenerate; with no base run yet, at the anchors' reference rate.
_RATE_FLOOR, _RATE_CEILING, _NO_BASE_RATE = 0.01, 0.99, 0.9

_REASONS: dict[str, str] = {
    "rollback": "regression at {where}; drop over {min_drop}",
    "keep": "no regression by the last look; {where}",
    "kept-unverified": "{age} without enough runs for the last look; {where}",
    "continue": "waiting for the next look; {where}",
}


@dataclass(frozen=True)
class MonitorConfig:
    """How the monitor decides; the defaults are the seeds' (seed §4.3).

    ``rule`` picks the boundary (``seed``: z >= ``z`` at every look; ``pocock``, ``obf``,
    ``spending``, ``spending-pocock`` at one-sided ``alpha``, default 0.05). Every rule also needs a
    drop over ``min_drop``. After ``max_age`` without reaching the last look the edit is
    ``kept-unverified``. Decisions state the rule's exact error rates at a base pass rate of
    ``design_p0`` (default: the base's observed rate at the look) and power against a drop of
    ``power_drop``.
    """

    looks: tuple[int, ...] = SEED_LOOKS
    min_drop: float = SEED_MIN_DROP
    z: float = SEED_Z
    rule: str = "seed"
    alpha: float | None = None
    max_age: timedelta = timedelta(days=7)
    design_p0: float | None = None
    power_drop: float = 0.1
    boundary: Boundary = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.max_age, timedelta) or self.max_age <= timedelta(0):
            raise BadInputError("max_age", self.max_age, "a positive timedelta")
        if self.design_p0 is not None:
            _checks.probability("design_p0", self.design_p0)
        if not 0.0 < _checks.non_negative("power_drop", self.power_drop) < 1.0:
            raise BadInputError("power_drop", self.power_drop, "a number strictly between 0 and 1")
        boundary = make_boundary(
            self.rule, self.looks, self.alpha, z=self.z, min_drop=self.min_drop
        )
        # Frozen: the boundary is derived once, here, from the validated fields, and the looks are
        # kept as the validated tuple so a config built from a list stays hashable.
        object.__setattr__(self, "looks", boundary.looks)
        object.__setattr__(self, "boundary", boundary)


@dataclass(frozen=True)
class MonitorDecision:
    """One decision, with the evidence and the rule's error rates behind it.

    ``look`` is the 1-based look last reached (``None`` before the first), ``runs`` its runs per
    side, ``z``/``drop`` the statistics there (drop = base rate - applied rate) and ``bound`` the z
    boundary. ``false_alarm`` is P(roll back | no change) and ``power`` P(roll back | the applied
    side passes ``power_drop`` less), both exact, at base rate ``p0``.
    """

    action: Action
    reason: str
    look: int | None
    runs: int | None
    base_passes: int | None
    applied_passes: int | None
    z: float | None
    drop: float | None
    bound: float | None
    rule: str
    p0: float
    p1: float
    false_alarm: float
    power: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def decide(
    config: MonitorConfig,
    base: Sequence[bool],
    applied: Sequence[bool],
    since_apply: timedelta,
) -> MonitorDecision:
    """Continue, roll back, keep, or mark kept-unverified.

    Args:
        config: the rule and its looks.
        base: pass (True) / fail (False) of the base revision's runs, in time order.
        applied: the same for the applied revision's runs since the apply.
        since_apply: time since the edit was applied.

    Probe runs (``lousho.probe``: the improve loop's own gate, canary and guard runs) must be
    filtered out upstream: only real traffic measures the edit. ``rollback``, ``keep`` and
    ``kept-unverified`` are final; the caller stops feeding runs once one is returned. A look
    reached before ``max_age`` is always judged, so an edit is kept-unverified only when the last
    look is still out of reach at ``max_age``.
    """
    base_runs = _outcomes("base", base)
    applied_runs = _outcomes("applied", applied)
    if not isinstance(since_apply, timedelta) or since_apply < timedelta(0):
        raise BadInputError("since_apply", since_apply, "a timedelta >= 0")
    boundary = config.boundary
    reached: tuple[int, int, int] | None = None  # (look index, base passes, applied passes)
    for k, n in enumerate(boundary.looks):
        if len(base_runs) < n or len(applied_runs) < n:
            break
        reached = (k, int(base_runs[:n].sum()), int(applied_runs[:n].sum()))
        if bool(boundary.stops(k, reached[1], reached[2])):
            return _decision(config, "rollback", reached, base_runs)
    if reached is not None and reached[0] == len(boundary.looks) - 1:
        return _decision(config, "keep", reached, base_runs)
    if since_apply >= config.max_age:
        return _decision(config, "kept-unverified", reached, base_runs)
    return _decision(config, "continue", reached, base_runs)


def _decision(
    config: MonitorConfig,
    action: Action,
    reached: tuple[int, int, int] | None,
    base_runs: np.ndarray,
) -> MonitorDecision:
    boundary = config.boundary
    p0, p1 = _design_rates(config, reached, base_runs)
    look = runs = base_passes = applied_passes = None
    z = drop = bound = None
    if reached is not None:
        k, base_passes, applied_passes = reached
        look, runs, bound = k + 1, boundary.looks[k], boundary.z[k]
        z = pooled_z(base_passes, runs, applied_passes, runs)
        drop = (base_passes - applied_passes) / runs
    if look is None:
        where = f"no look yet (first at {boundary.looks[0]} runs per side)"
    else:
        where = f"look {look} at {runs} runs per side: {_compared(base_passes, applied_passes, runs, z, bound)}"
    return MonitorDecision(
        action=action,
        reason=_REASONS[action].format(where=where, min_drop=boundary.min_drop, age=config.max_age),
        look=look,
        runs=runs,
        base_passes=base_passes,
        applied_passes=applied_passes,
        z=z,
        drop=drop,
        bound=bound,
        rule=boundary.rule,
        p0=p0,
        p1=p1,
        false_alarm=float(stopping_probabilities(boundary, p0, p0).sum()),
        power=float(stopping_probabilities(boundary, p0, p1).sum()),
    )


def _compared(base_passes: int, applied_passes: int, runs: int, z: float, bound: float) -> str:
    """The look in words first, numbers after: a negative drop is the edit helping, which as
    "drop -0.200, z -3.65" reads like a failure."""
    points = abs(base_passes - applied_passes) * 100 / runs
    if applied_passes > base_passes:
        said = f"the edit passes {points:.0f} points more than the base"
    elif applied_passes < base_passes:
        said = f"the edit passes {points:.0f} points less than the base"
    else:
        said = "the edit passes as often as the base"
    return (f"{said} ({applied_passes}/{runs} vs {base_passes}/{runs}); "
            f"regression z = {z:.2f}, rolled back at {bound:.2f} or more")


def _design_rates(
    config: MonitorConfig, reached: tuple[int, int, int] | None, base_runs: np.ndarray
) -> tuple[float, float]:
    if config.design_p0 is not None:
        p0 = config.design_p0
    elif reached is not None:
        p0 = reached[1] / config.boundary.looks[reached[0]]
    elif base_runs.size:
        p0 = float(base_runs.mean())
    else:
        p0 = _NO_BASE_RATE
    p0 = min(max(p0, _RATE_FLOOR), _RATE_CEILING)
    return p0, max(p0 - config.power_drop, _RATE_FLOOR / 10)


def _outcomes(name: str, runs: Sequence[bool]) -> np.ndarray:
    values = np.asarray(runs)
    if values.ndim != 1 or (values.size and values.dtype != np.bool_):
        raise BadInputError(name, f"array of {values.dtype}", "a 1-D sequence of pass/fail booleans")
    return values.astype(bool)
