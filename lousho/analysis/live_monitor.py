"""The monitor on real traffic: reads a base and an applied revision's runs from the store, then
lets the pure decision core (``monitor.decide``) judge them at its planned looks."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import polars as pl

from lousho.analysis.frames import runs
from lousho.analysis.monitor import MonitorConfig, MonitorDecision, decide
from lousho.observe.client.store_client import StoreClient


@dataclass(frozen=True)
class Monitor:
    """Watches one applied edit of one agent's harness (seed §4.3).

    Base side: the most recent scored runs of ``base_revision`` that started before ``applied_at``
    (as many as the last look needs), oldest first. Applied side: the scored runs of
    ``applied_revision`` from ``applied_at`` on, oldest first. Probe runs are never read: the loop's
    own gate, canary and guard runs must not vote on live quality. Unscored runs (no pass/fail
    verdict) carry no evidence and are skipped.
    """

    store: StoreClient
    agent: str
    base_revision: str
    applied_revision: str
    applied_at: datetime
    config: MonitorConfig = field(default_factory=MonitorConfig)

    def outcomes(self) -> tuple[list[bool], list[bool]]:
        applied_ns = _ns(self.applied_at)
        base = runs(self.store, agent=self.agent, revision=self.base_revision)
        base = base.filter(pl.col("passed").is_not_null() & (pl.col("started_ns") < applied_ns))
        base = base.tail(self.config.looks[-1])
        applied = runs(self.store, agent=self.agent, revision=self.applied_revision, since=applied_ns)
        applied = applied.filter(pl.col("passed").is_not_null())
        return base["passed"].to_list(), applied["passed"].to_list()

    def check(self, now: datetime | None = None) -> MonitorDecision:
        base, applied = self.outcomes()
        now = now or datetime.now(UTC)
        return decide(self.config, base, applied, _aware(now) - _aware(self.applied_at))


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _ns(moment: datetime) -> int:
    return int(_aware(moment).timestamp() * 1_000_000) * 1000
