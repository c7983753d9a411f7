"""The monitor's path for one applied edit (seed §4.3), as a figure.

Top: each arm's pass rate on the runs a look at each run count compares. Bottom: the statistic of the design
that decides (``MonitorPath``: the session-clustered z of a concurrent watch, the case-stratified z of a
stratified one, the pooled z of the seeds' rule) at every run count up to the last look, against the rule's
boundary at its looks. Only the looks decide (``monitor.decide``); the path between them shows how the
evidence grew, and at a look the drawn point is the decision's z.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lousho.analysis.monitor import MonitorConfig, MonitorDecision, decide
from lousho.analysis.monitor_path import MonitorPath
from lousho.improve.applied_edit import AppliedEdit
from lousho.observe.client.store_client import StoreClient
from lousho.plot._canvas import new_figure
from lousho.plot.errors import NoRuns

BASE, APPLIED, BOUNDARY, DECISION = "#4c72b0", "#dd8452", "#c44e52", "#333333"
_TITLE_WIDTH = 100  # characters a title line holds at the figure's width and the medium font


@dataclass(frozen=True)
class EditMonitor:
    """The monitor on one applied edit of ``agent``: its path and its decision on those runs, as of a moment."""

    agent: str
    edit: AppliedEdit
    path: MonitorPath
    decision: MonitorDecision


def monitor_path(store: StoreClient, agent: str, edit: AppliedEdit, config: MonitorConfig | None = None,
                 now: datetime | None = None) -> EditMonitor:
    """Read both arms once, as the live monitor does, and decide on them; NoRuns when an arm has no run its
    design compares."""
    config = config or MonitorConfig()
    monitor = edit.monitor(store, agent, config)
    path = MonitorPath.of_arms(monitor.arms(), config)
    if not path.base_runs or not path.applied_runs:
        where = "in the held-back sessions since the apply" if path.design == "concurrent" else "before the apply"
        raise NoRuns(f"agent {agent!r}: the monitor ({path.design_label}) has {path.base_runs} live runs of the "
                     f"base {edit.before} {where} and {path.applied_runs} of {edit.after} since it was applied at "
                     f"{edit.applied_at.isoformat()}; it needs both")
    # A clock behind the apply time (another machine's watcher) reads as "just applied", not as an error.
    since_apply = max((now or datetime.now(UTC)) - edit.applied_at, timedelta(0))
    # As Monitor.check decides: the design the watch runs in, on the arms just read.
    return EditMonitor(agent, edit, path, decide(path.config, path.base, path.applied, since_apply))


def draw_monitor(monitor: EditMonitor) -> Figure:
    figure, (rates, zs) = new_figure(8.0, 6.5, rows=2)
    path = monitor.path
    boundary = path.config.boundary
    for axes in (rates, zs):
        for look in boundary.looks:
            axes.axvline(look, color="#bbbbbb", linewidth=0.8, linestyle=":", zorder=0)
        axes.grid(alpha=0.3)
    _draw_rates(rates, monitor)
    n = np.array([p.n for p in path.points], dtype=int)
    z = path.z()
    zs.axhline(0.0, color="#888888", linewidth=0.8)
    zs.plot(n, z, color=DECISION, linewidth=1.4, label=path.statistic, gid="statistic")
    finite = [(look, bound) for look, bound in zip(boundary.looks, boundary.z, strict=True) if np.isfinite(bound)]
    if finite:
        looks, bounds = zip(*finite, strict=True)
        drop = f" and a drop over {boundary.min_drop:g}" if boundary.min_drop > 0 else ""
        zs.plot(looks, bounds, color=BOUNDARY, linestyle="--", marker="_", markersize=18, markeredgewidth=2.5,
                label=f"{boundary.rule} boundary{drop}")
    at = path.at_looks()
    if at:
        zs.scatter([p.n for p in at], [p.z for p in at], color=DECISION, zorder=3, label="at a look", gid="looks")
    if monitor.decision.action == "rollback" and monitor.decision.runs:
        zs.scatter([monitor.decision.runs], [monitor.decision.z], marker="X", s=120, color=BOUNDARY, zorder=4,
                   label="rolled back")
    zs.set_xlabel(path.run_axis)
    zs.set_ylabel(path.statistic.split(" (")[0])
    zs.set_xlim(0, boundary.looks[-1] + 2)
    # Room above the boundary for the legend, so it never hides the bound it explains.
    tops = [b for b in boundary.z if np.isfinite(b)] + list(z)
    zs.set_ylim(min([-3.0, *z]) - 0.3, max(tops, default=3.0) + 2.0)
    zs.legend(loc="upper left", fontsize="small", ncols=3)
    d, edit = monitor.decision, monitor.edit
    lines = [f"{monitor.agent}: {edit.before[:12]} → {edit.after[:12]}"
             f" ({edit.status or 'applied ' + edit.applied_at.strftime('%Y-%m-%d %H:%M UTC')})",
             path.design_label,
             f"{d.action}: {d.reason}",
             f"false rollback {d.false_alarm:.3f}, power {d.power:.3f} "
             f"(base pass rate {d.p0:.2f}, applied {d.p1:.2f}; {_rates_are(d)})"]
    # The reason is a sentence with numbers: wrapped, so a long one is not cut at the figure's edges.
    figure.suptitle("\n".join(textwrap.fill(line, _TITLE_WIDTH) for line in lines), fontsize="medium")
    return figure


def _rates_are(decision: MonitorDecision) -> str:
    return "exact on independent runs" if decision.design == "seed" else "simulated"


def _draw_rates(axes: Axes, monitor: EditMonitor) -> None:
    """Each arm's pass rate on the runs compared at each run count of the path (a crash a failure, except to the
    seed design), so both lines share the bottom panel's x axis."""
    path, edit = monitor.path, monitor.edit
    n = np.array([p.n for p in path.points], dtype=int)
    base, applied = path.outcomes
    for name, revision, colour, rate, outcomes in (
            ("base", edit.before, BASE, [p.base_passes / p.n for p in path.points], base),
            ("applied", edit.after, APPLIED, [p.applied_passes / p.applied_runs for p in path.points], applied)):
        axes.plot(n, rate, color=colour, linewidth=1.6,
                  label=f"{name} {revision[:12]}: {int(outcomes.sum())}/{len(outcomes)} passed")
    axes.set_ylim(-0.02, 1.05)
    axes.set_ylabel("pass rate of the compared runs")
    axes.legend(loc="lower right", fontsize="small")
