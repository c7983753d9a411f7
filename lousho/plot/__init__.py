"""plot: PNGs of the monitor's path and of pass rates by harness revision (matplotlib, Agg backend).

Names load on first use (PEP 562): importing the package does not import matplotlib.
"""

from __future__ import annotations

from lousho.kernel._lazy import lazy_exports

_EXPORTS = {
    "AppliedEdit": "lousho.improve.applied_edit",
    "EditMonitor": "lousho.plot.monitor_plot",
    "MonitorPath": "lousho.analysis.monitor_path",
    "applied_edit": "lousho.plot.edits",
    "draw_monitor": "lousho.plot.monitor_plot",
    "draw_pass_rates": "lousho.plot.pass_rate_plot",
    "monitor_path": "lousho.plot.monitor_plot",
    "pass_rate_paths": "lousho.plot.pass_rate_plot",
    "watched_edit": "lousho.plot.edits",
}

__all__, __getattr__ = lazy_exports("lousho.plot", _EXPORTS)
