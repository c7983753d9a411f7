"""The monitor's path for one applied edit (seed §4.3), as a figure.

Top: each side's cumulative pass rate over its own runs. Bottom: the pooled two-proportion z on the
cumulative counts at every run count both sides have reached, against the rule's boundary at its
looks. Only the looks decide (``monitor.decide``); the path between them shows how the evidence grew.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lousho.analysis.live_monitor import Monitor
from lousho.analysis.monitor import MonitorConfig, MonitorDecision, decide
from lousho.analysis.monitor_path import MonitorPath
from lousho.improve.applied_edit import AppliedEdit
from lousho.observe.client.store_client import StoreClient
from lousho.plot._canvas import new_figure
from lousho.plot.errors import NoRuns

BASE, APPLIED, BOUNDARY, DECISION = "#4c72b0", "#dd8452", "#c44e52", "#333333"


@dataclass(frozen=True)
class EditMonitor:
    """The monitor on one applied edit of ``agent``: its path and its decision on those runs, as of a moment."""

    agent: str
    edit: AppliedEdit
    path: MonitorPath
    decision: MonitorDecision


def monitor_path(store: StoreClient, agent: str, edit: AppliedEdit, config: MonitorConfig | None = None,
                 now: datetime | None = None) -> EditMonitor:
    """Read both sides once and decide on them; NoRuns when a side has no scored live run."""
    config = config or MonitorConfig()
    monitor = Monitor(store, agent, edit.before, edit.after, edit.applied_at, config)
    base, applied = monitor.outcomes()
    if not base or not applied:
        raise NoRuns(f"agent {agent!r}: the monitor has {len(base)} scored live runs of the base {edit.before} "
                     f"and {len(applied)} of {edit.after} since it was applied at {edit.applied_at.isoformat()}; "
                     "it needs both")
    # A clock behind the apply time (another machine's watcher) reads as "just applied", not as an error.
    since_apply = max((now or datetime.now(UTC)) - edit.applied_at, timedelta(0))
    decision = decide(config, base, applied, since_apply)
    return EditMonitor(agent, edit, MonitorPath(tuple(base), tuple(applied), config), decision)


def draw_monitor(monitor: EditMonitor) -> Figure:
    figure, (rates, zs) = new_figure(8.0, 6.5, rows=2)
    path = monitor.path
    boundary = path.config.boundary
    for axes in (rates, zs):
        for look in boundary.looks:
            axes.axvline(look, color="#bbbbbb", linewidth=0.8, linestyle=":", zorder=0)
        axes.grid(alpha=0.3)
    _draw_rates(rates, monitor)
    z = path.z()
    n = np.arange(1, path.paired + 1)
    zs.axhline(0.0, color="#888888", linewidth=0.8)
    zs.plot(n, z, color=DECISION, linewidth=1.4, label="cumulative z (base − applied)")
    finite = [(look, bound) for look, bound in zip(boundary.looks, boundary.z, strict=True) if np.isfinite(bound)]
    if finite:
        looks, bounds = zip(*finite, strict=True)
        zs.plot(looks, bounds, color=BOUNDARY, linestyle="--", marker="_", markersize=18, markeredgewidth=2.5,
                label=f"{boundary.rule} boundary (and a drop over {boundary.min_drop:g})")
    reached = [k for k, look in enumerate(boundary.looks) if look <= path.paired]
    if reached:
        at = np.array([boundary.looks[k] for k in reached])
        zs.scatter(at, z[at - 1], color=DECISION, zorder=3, label="z at a look")
    if monitor.decision.action == "rollback" and monitor.decision.runs:
        zs.scatter([monitor.decision.runs], [monitor.decision.z], marker="X", s=120, color=BOUNDARY, zorder=4,
                   label="rolled back")
    zs.set_xlabel("runs per side")
    zs.set_ylabel("pooled z")
    zs.set_xlim(0, max(boundary.looks[-1], path.paired) + 2)
    zs.legend(loc="best", fontsize="small")
    d, edit = monitor.decision, monitor.edit
    figure.suptitle(f"{monitor.agent}: {edit.before[:12]} → {edit.after[:12]}"
                    f" ({edit.status or 'applied ' + edit.applied_at.strftime('%Y-%m-%d %H:%M UTC')})\n"
                    f"{d.action}: {d.reason}\n"
                    f"exact false rollback {d.false_alarm:.3f}, power {d.power:.3f} "
                    f"(base pass rate {d.p0:.2f}, applied {d.p1:.2f})", fontsize="medium")
    return figure


def _draw_rates(axes: Axes, monitor: EditMonitor) -> None:
    for runs, colour, name, revision in ((monitor.path.base, BASE, "base", monitor.edit.before),
                                         (monitor.path.applied, APPLIED, "applied", monitor.edit.after)):
        n = np.arange(1, len(runs) + 1)
        rate = np.cumsum(runs) / n
        axes.plot(n, rate, color=colour, linewidth=1.6,
                  label=f"{name} {revision[:12]}: {sum(runs)}/{len(runs)} passed")
    axes.set_ylim(-0.02, 1.05)
    axes.set_ylabel("cumulative pass rate")
    axes.legend(loc="lower right", fontsize="small")
