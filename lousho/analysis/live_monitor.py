"""The monitor on real traffic: reads a base and an applied revision's runs from the store, then
lets the pure decision core (``monitor.decide``) judge them at its planned looks."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import polars as pl

from lousho.analysis.frames import runs
from lousho.analysis.monitor import Arm, MonitorConfig, MonitorDecision, decide
from lousho.analysis.outages import outage_windows, provider_marks
from lousho.kernel.outage_rule import THRESHOLD
from lousho.observe.client.store_client import StoreClient

# While the loop holds the base back, the watch waits for held-back runs; it falls back to stratified only
# once this many sessions of the applied revision since the apply went unrouted (no lousho.traffic.arm): then
# the agent does not call the router, and no held-back run will come. The first look's size.
UNROUTED_FALLBACK = 20


@dataclass(frozen=True)
class Plan:
    """What one check compares: the design it runs in, both arms, why that design (when it is not the one
    configured), how many runs outage windows left out and those windows ((first start, last start) in ns)."""

    design: str
    base: Arm
    applied: Arm
    note: str = ""
    outage_runs: int = 0
    outage_windows: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Monitor:
    """Watches one applied edit of one agent's harness (seed §4.3).

    Applied side: the runs of ``applied_revision`` from ``applied_at`` on, oldest first. Base side, by the
    config's design: ``concurrent``, the runs of ``base_revision`` from ``applied_at`` on (the sessions held
    back on the base); when there are none the watch falls back to ``stratified``, the base's runs nearest
    before the apply (as many as the last look needs), as the ``seed`` design also reads them. With
    ``holdback`` (the loop keeps a share of sessions on the base for this watch, ``lousho.improve.traffic``)
    it does not fall back while held-back runs may still come: it waits (no look) until
    ``UNROUTED_FALLBACK`` sessions of the applied revision since the apply were served unrouted, the sign
    that the agent does not call the router. The stratified design leaves out, on both sides, the runs in
    ``outage_windows`` ((start_ns, end_ns) pairs) and, with ``detect_outages``, in the windows
    ``lousho.analysis.outages`` finds in both sides' runs taken together in start order (the breaker's rule: 3
    consecutive runs the provider failed, in the run's own error or in a model call's, verdict or not). The
    decision records the design it ran, why it fell back (``design_note``), the runs outages left out and the
    windows, and its reason says so. Probe runs
    are never read: the loop's own gate, canary and guard runs must not vote on live quality. A run that
    ended in an error without a verdict (a crash, a no-progress stop, a quarantine) is a failure to every
    design but the seed's; a run that ended well but unscored carries no evidence and is skipped.
    """

    store: StoreClient
    agent: str
    base_revision: str
    applied_revision: str
    applied_at: datetime
    config: MonitorConfig = field(default_factory=MonitorConfig)
    outage_windows: tuple[tuple[int, int], ...] = ()
    holdback: bool = False
    detect_outages: bool = True

    def arms(self) -> tuple[str, Arm, Arm]:
        """(the design the watch runs in, the base arm, the applied arm)."""
        plan = self.plan()
        return plan.design, plan.base, plan.applied

    def plan(self) -> Plan:
        applied_ns = _ns(self.applied_at)
        base_runs = runs(self.store, agent=self.agent, revision=self.base_revision)
        applied_runs = runs(self.store, agent=self.agent, revision=self.applied_revision, since=applied_ns)
        base, applied = _judged(base_runs), _judged(applied_runs)
        design = self.config.design
        held_back = base.filter(pl.col("started_ns") >= applied_ns)
        if design == "concurrent" and held_back.height:
            return Plan(design, _arm(held_back), _arm(applied))
        note = ""
        if design == "concurrent":
            unrouted = _sessions(applied_runs.filter(pl.col("traffic_arm").is_null()))
            if self.holdback and unrouted < UNROUTED_FALLBACK:
                return Plan(design, _arm(held_back), _arm(applied),
                            f"waiting for held-back runs ({unrouted} unrouted sessions of the edit so far)")
            design = "stratified"
            note = (f"no held-back run: {unrouted} sessions of the edit since the apply were not routed (the agent "
                    "does not call lousho.agent.traffic_route.route)" if self.holdback else
                    "no run of the base since the apply: no holdback")
        before = base.filter(pl.col("started_ns") < applied_ns)
        if design == "seed":
            return Plan(design, _arm(before.tail(self.config.looks[-1])), _arm(applied), note)
        windows = self.outage_windows + (self._detected(base_runs, applied_runs, applied_ns) if self.detect_outages
                                         else ())
        kept_before, kept_applied = _outside(before, windows), _outside(applied, windows)
        left_out = before.height - kept_before.height + applied.height - kept_applied.height
        return Plan(design, _arm(kept_before.tail(self.config.looks[-1])), _arm(kept_applied), note, left_out,
                    tuple(w for w in windows if _holds_any(before, applied, w)))

    def _detected(self, base_runs: pl.DataFrame, applied_runs: pl.DataFrame,
                  applied_ns: int) -> tuple[tuple[int, int], ...]:
        """The outage windows in the agent's traffic either side of the apply, as one stream in start order: an
        outage across the apply is one streak. Every run counts towards a streak, judged or not."""
        before = base_runs.filter(pl.col("started_ns") < applied_ns)
        timeline = pl.concat([before, applied_runs], how="diagonal_relaxed")
        return outage_windows(timeline, provider_marks(self.store, timeline))

    def outcomes(self) -> tuple[list[bool], list[bool]]:
        """The scored outcomes of each side as the seed design reads them (the path plots these)."""
        _, base, applied = self.arms()
        return ([p for p in base.passed if p is not None], [p for p in applied.passed if p is not None])

    def check(self, now: datetime | None = None) -> MonitorDecision:
        plan = self.plan()
        config = self.config if plan.design == self.config.design else replace(self.config, design=plan.design)
        now = now or datetime.now(UTC)
        decision = decide(config, plan.base, plan.applied, _aware(now) - _aware(self.applied_at))
        return replace(decision, reason=decision.reason + _outage_note(plan), design_note=plan.note,
                       outage_runs=plan.outage_runs, outage_windows=plan.outage_windows)


def _outage_note(plan: Plan) -> str:
    if not plan.outage_windows:
        return ""
    count = len(plan.outage_windows)
    return (f" [{plan.outage_runs} runs in {count} provider outage window{'s' if count > 1 else ''} left out: "
            f"{THRESHOLD} or more consecutive runs the provider failed]")


def _holds_any(before: pl.DataFrame, applied: pl.DataFrame, window: tuple[int, int]) -> bool:
    """Does ``window`` hold a run either side compares (a window given from outside may hold none)?"""
    return any(frame.filter(pl.col("started_ns").is_between(*window)).height for frame in (before, applied))


def _outside(frame: pl.DataFrame, windows: tuple[tuple[int, int], ...]) -> pl.DataFrame:
    for start, end in windows:
        frame = frame.filter((pl.col("started_ns") < start) | (pl.col("started_ns") > end))
    return frame


def _sessions(frame: pl.DataFrame) -> int:
    """Distinct sessions among ``frame``'s runs; a run without a session is one of its own."""
    ids = [c if c is not None else ("run", r) for c, r in zip(frame["conversation_id"].to_list(),
                                                               frame["run_id"].to_list(), strict=True)]
    return len(set(ids))


def _judged(frame: pl.DataFrame) -> pl.DataFrame:
    """Runs with a verdict, and runs that ended in an error without one (their ``passed`` stays NULL)."""
    return frame.filter(pl.col("passed").is_not_null() | (pl.col("status") == "error"))


def _arm(frame: pl.DataFrame) -> Arm:
    return Arm(tuple(frame["passed"].to_list()), tuple(frame["conversation_id"].to_list()),
               tuple(frame["case_id"].to_list()), tuple(int(v) for v in frame["started_ns"].to_list()))


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _ns(moment: datetime) -> int:
    return int(_aware(moment).timestamp() * 1_000_000) * 1000
