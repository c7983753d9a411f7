"""An applied edit as the monitor judges it: the base revision, the applied one, and when it was applied.

One definition for everything that shows the monitor on an edit (the page, ``lousho plot monitor``). An
edit comes from ``.lousho/state.json`` (``watched``: what the watcher judges now) or from an ``apply`` line
of the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lousho.analysis.live_monitor import Monitor
    from lousho.analysis.monitor import MonitorConfig


@dataclass(frozen=True)
class AppliedEdit:
    """``status`` is the loop's word for it (monitoring, traffic, kept, kept-unverified, rolled-back) when it
    comes from ``state.json``; None from the audit log, which records the apply only. ``source`` says where
    it was read (``state.json``, ``audit line N`` or a file's path)."""

    before: str
    after: str
    applied_at: datetime
    status: str | None
    reason: str | None
    source: str
    # The monitor's design the watch recorded and the share of sessions held back on the base (None: no
    # holdback); None for an audit line and for an edit watched before the loop recorded them.
    design: str | None = None
    holdback: float | None = None

    def monitor(self, store: Any, agent: str, config: MonitorConfig | None = None) -> Monitor:
        """The live monitor on this edit as its watcher builds it (improve/watcher.py): the recorded design and
        holdback unless ``config`` names a design, so the page and the plot show the decision the loop makes."""
        from lousho.analysis.live_monitor import Monitor
        from lousho.analysis.monitor import HOLDBACK, MonitorConfig

        config = config or MonitorConfig(design=self.design or "concurrent")
        if self.design is not None and config.design == self.design:
            config = replace(config, holdback=self.holdback or HOLDBACK)
        return Monitor(store, agent, self.before, self.after, self.applied_at, config,
                       holdback=self.holdback is not None and config.design == "concurrent")

    @property
    def applied_ns(self) -> int:
        # Microseconds first, as analysis' live monitor does, so both count the same runs as "after".
        return int(self.applied_at.timestamp() * 1_000_000) * 1000


def edit_from(doc: dict[str, Any], at: Any, source: str) -> AppliedEdit | None:
    """The edit a ``watched`` record or an ``apply`` line describes (``at``: its ISO time), or None when it
    lacks before, after or a valid time: files a person can edit are read without trusting them."""
    before, after = doc.get("before"), doc.get("after")
    if not isinstance(before, str) or not isinstance(after, str) or not isinstance(at, str):
        return None
    try:
        moment = datetime.fromisoformat(at)
    except ValueError:
        return None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    status, reason = doc.get("status"), doc.get("reason")
    design, holdback = doc.get("design"), doc.get("holdback")
    return AppliedEdit(before, after, moment, str(status) if status is not None else None,
                       str(reason) if reason is not None else None, source,
                       design if design in ("concurrent", "stratified", "seed") else None,
                       float(holdback) if isinstance(holdback, int | float) and not isinstance(holdback, bool)
                       and 0 < holdback < 1 else None)
