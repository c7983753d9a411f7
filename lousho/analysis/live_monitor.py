"""The monitor on real traffic: reads a base and an applied revision's runs from the store, then
lets the pure decision core (``monitor.decide``) judge them at its planned looks."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import polars as pl

from lousho.analysis.frames import runs
from lousho.analysis.monitor import Arm, MonitorConfig, MonitorDecision, decide
from lousho.observe.client.store_client import StoreClient


@dataclass(frozen=True)
class Monitor:
    """Watches one applied edit of one agent's harness (seed §4.3).

    Applied side: the runs of ``applied_revision`` from ``applied_at`` on, oldest first. Base side, by the
    config's design: ``concurrent``, the runs of ``base_revision`` from ``applied_at`` on (the sessions held
    back on the base); when there are none (no holdback: a harness read by one process) the watch falls
    back to ``stratified``, the base's runs nearest before the apply (as many as the last look needs), outside
    ``outage_windows`` ((start_ns, end_ns) pairs the outage breaker flagged), as the ``seed`` design also
    reads them. The decision records the design it ran. Probe runs are never read: the loop's own gate,
    canary and guard runs must not vote on live quality. A run that ended in an error without a verdict (a
    crash, a no-progress stop, a quarantine) is a failure to every design but the seed's; a run that ended
    well but unscored carries no evidence and is skipped.
    """

    store: StoreClient
    agent: str
    base_revision: str
    applied_revision: str
    applied_at: datetime
    config: MonitorConfig = field(default_factory=MonitorConfig)
    outage_windows: tuple[tuple[int, int], ...] = ()

    def arms(self) -> tuple[str, Arm, Arm]:
        """(the design the watch runs in, the base arm, the applied arm)."""
        applied_ns = _ns(self.applied_at)
        base = _judged(runs(self.store, agent=self.agent, revision=self.base_revision))
        applied = _judged(runs(self.store, agent=self.agent, revision=self.applied_revision, since=applied_ns))
        design = self.config.design
        held_back = base.filter(pl.col("started_ns") >= applied_ns)
        if design == "concurrent" and held_back.height:
            return design, _arm(held_back), _arm(applied)
        if design == "concurrent":
            design = "stratified"
        before = base.filter(pl.col("started_ns") < applied_ns)
        if design != "seed":
            before, applied = self._outside_outages(before), self._outside_outages(applied)
        return design, _arm(before.tail(self.config.looks[-1])), _arm(applied)

    def outcomes(self) -> tuple[list[bool], list[bool]]:
        """The scored outcomes of each side as the seed design reads them (the path plots these)."""
        _, base, applied = self.arms()
        return ([p for p in base.passed if p is not None], [p for p in applied.passed if p is not None])

    def check(self, now: datetime | None = None) -> MonitorDecision:
        design, base, applied = self.arms()
        config = self.config if design == self.config.design else replace(self.config, design=design)
        now = now or datetime.now(UTC)
        return decide(config, base, applied, _aware(now) - _aware(self.applied_at))

    def _outside_outages(self, frame: pl.DataFrame) -> pl.DataFrame:
        for start, end in self.outage_windows:
            frame = frame.filter((pl.col("started_ns") < start) | (pl.col("started_ns") > end))
        return frame


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
