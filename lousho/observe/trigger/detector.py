"""The regression detectors, pure: the watcher (``cycle.py``) reads the runs and starts the cycle when one fires.

The default, ``cusum``: a Bernoulli CUSUM per agent and revision (``lousho.kernel.cusum``), fed every run
of the revision in order, against a reference of the revision's own earliest runs, its threshold calibrated
to a weekly false-trigger budget. The seeds' rule stays available by name (``--trigger seed``): the newest
20 scored runs against the 20 before them at each look (seed §4.3), which fires on unchanged traffic (it
corrects for none of its repeated looks) and misses a drop that falls between two looks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lousho.kernel import cusum, monitor_rule

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

    def evidence(self) -> dict[str, object]:
        """The fields of a trigger log line. No false-trigger rate: the rule's repeated looks have none stated."""
        return {"rule": "seed", "window": self.size, "before_passes": self.before_passes,
                "recent_passes": self.recent_passes, "z": None if self.z is None else round(self.z, 4)}


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


# --- the default: a Bernoulli CUSUM per agent and revision (lousho.kernel.cusum) -----------------------

RULES = ("cusum", "seed")


@dataclass(frozen=True)
class CusumConfig:
    """What the CUSUM looks for and how often it may be wrong: ``weekly_budget`` is P(a false trigger) per
    week over all ``agents`` registered, each agent's share ``weekly_budget / agents``."""

    drop: float = cusum.DROP
    reference_runs: int = cusum.REFERENCE_RUNS
    reference_hours: float = cusum.REFERENCE_HOURS
    weekly_budget: float = cusum.WEEKLY_BUDGET
    agents: int = 1
    # The agent's runs a day, when known; None: observed over the reference (its runs over its time span).
    runs_per_day: float | None = None


def reference_complete(config: CusumConfig, runs: int, span_s: float) -> bool:
    """Whether a revision's first ``runs`` runs, the first and the last ``span_s`` seconds apart, are its
    whole reference: at least ``reference_runs`` of them spanning at least ``reference_hours``."""
    return runs >= config.reference_runs and span_s >= config.reference_hours * 3600


def calibrated(config: CusumConfig, runs: int, passes: int, span_s: float,
               design: float = 1.0) -> tuple[cusum.Calibration, float]:
    """The threshold of a complete reference (``runs`` runs, ``passes`` of them passes, over ``span_s``
    seconds, sessions inflating its variance by ``design``) and its pass rate p0: a week is seven days of
    ``runs_per_day``, or of the reference's own rate when that is unknown; the budget is the agent's share."""
    p0 = cusum.reference_rate(passes, runs)
    per_day = config.runs_per_day or runs * 86_400 / max(span_s, 1.0)
    calibration = cusum.calibrate(p0, runs, round(7 * per_day), config.weekly_budget / config.agents, design,
                                  config.drop)
    return calibration, p0


@dataclass(frozen=True)
class Run:
    """One run of the revision, in the order runs ended. ``passed`` None: unscored or no verdict (a failure)."""

    run_id: str
    ended_us: int
    passed: bool | None
    session: str | None = None


@dataclass(frozen=True)
class Reading:
    """The detector's state as the page, ``/metrics`` and the trigger's log show it."""

    revision: str | None  # None: the agent's runs carry no revision (one unversioned revision)
    reference_runs: int  # runs in the reference so far (all of it once complete)
    reference_needed: int
    statistic: float  # 0 until the reference is complete
    threshold: float | None  # None until the reference is complete: the detector cannot fire
    runs_watched: int
    alarm_run: int | None  # the watched run at which the statistic first reached the threshold
    p0: float | None = None
    p1: float | None = None
    calibration: cusum.Calibration | None = None

    @property
    def regressed(self) -> bool:
        return self.alarm_run is not None

    def describe(self) -> str:
        if self.threshold is None:
            return (f"reference incomplete: {self.reference_runs} of at least {self.reference_needed} runs "
                    "(the detector does not fire before)")
        return (f"CUSUM {self.statistic:.2f} (threshold {self.threshold:.2f}) after {self.runs_watched} runs "
                f"watched; reference pass rate {self.p0:.3f} over {self.reference_runs} runs, looking for "
                f"{self.p1:.3f}")

    def evidence(self) -> dict[str, object]:
        """The fields of a trigger log line: the statistic, and the false-trigger rate with its model."""
        out: dict[str, object] = {
            "rule": "cusum", "statistic": round(self.statistic, 4),
            "threshold": None if self.threshold is None else round(self.threshold, 4),
            "reference_runs": self.reference_runs, "runs_watched": self.runs_watched, "alarm_run": self.alarm_run,
            "p0": None if self.p0 is None else round(self.p0, 4), "p1": None if self.p1 is None else round(self.p1, 4),
        }
        c = self.calibration
        if c is not None:
            out.update(false_trigger_per_week=c.alpha, week_runs=c.week_runs, design_effect=c.design_effect,
                       budget_met=c.budget_met, calibration_streams=c.streams, model=cusum.MODEL)
        return out


class Detector:
    """The CUSUM of one agent's revision, fed every run in the order they ended (never only the newest).

    The revision's earliest runs make the reference: at least ``reference_runs`` of them, spanning at least
    ``reference_hours``. Until then the detector reports how far the reference is and cannot fire. Then the
    threshold is calibrated (``cusum.calibrate``) and every later run updates the statistic."""

    def __init__(self, revision: str | None, config: CusumConfig) -> None:
        self.revision = revision
        self.config = config
        self.position: tuple[int, str] | None = None  # the last run fed: (ended_us, run_id)
        self._ref_runs = self._ref_passes = 0
        self._ref_first_us: int | None = None
        self._sessions: dict[str, list[int]] = {}
        self._singletons: list[tuple[int, int]] = []
        self._step: tuple[float, float] | None = None
        self._calibration: cusum.Calibration | None = None
        self._p0 = self._p1 = None
        self.statistic = 0.0
        self.runs_watched = 0
        self.alarm_run: int | None = None

    def carried_to(self, revision: str | None) -> Detector:
        """A detector for ``revision``, the one that followed this detector's: while the new revision has no
        reference of its own, it is judged against this one's (a changed prompt watched against the revision
        before it, as issue 26 asks), with the statistic from 0. Before this reference is complete, the new
        revision builds its own from its first runs."""
        carried = Detector(revision, self.config)
        if self._step is not None:
            carried._ref_runs, carried._ref_passes, carried._ref_first_us = (
                self._ref_runs, self._ref_passes, self._ref_first_us)
            carried._calibration, carried._step = self._calibration, self._step
            carried._p0, carried._p1 = self._p0, self._p1
        return carried

    def feed(self, runs: Sequence[Run]) -> None:
        for run in runs:
            self.position = (run.ended_us, run.run_id)
            passed = run.passed is True
            if self._step is None:
                self._add_reference(run, passed)
                continue
            self.statistic = cusum.update(self.statistic, passed, self._step)
            self.runs_watched += 1
            if self.alarm_run is None and self.statistic >= self._calibration.h:  # type: ignore[union-attr]
                self.alarm_run = self.runs_watched

    def _add_reference(self, run: Run, passed: bool) -> None:
        self._ref_runs += 1
        self._ref_passes += passed
        if self._ref_first_us is None:
            self._ref_first_us = run.ended_us
        if run.session is None:
            self._singletons.append((1, int(passed)))
        else:
            counts = self._sessions.setdefault(run.session, [0, 0])
            counts[0] += 1
            counts[1] += passed
        span_s = (run.ended_us - self._ref_first_us) / 1e6
        if reference_complete(self.config, self._ref_runs, span_s):
            self._complete(span_s)

    def _complete(self, span_s: float) -> None:
        c = self.config
        sessions = [tuple(v) for v in self._sessions.values()] + self._singletons
        design = cusum.design_effect(sessions, self._ref_runs, self._ref_passes)  # type: ignore[arg-type]
        self._calibration, p0 = calibrated(c, self._ref_runs, self._ref_passes, span_s, design)
        self._step = cusum.steps(p0, c.drop)
        self._p0, self._p1 = p0, max(p0 - c.drop, p0 / 2)
        self._sessions, self._singletons = {}, []

    def reading(self) -> Reading:
        cal = self._calibration
        return Reading(self.revision, self._ref_runs, self.config.reference_runs, self.statistic,
                       None if cal is None else cal.h, self.runs_watched, self.alarm_run, self._p0, self._p1, cal)
