"""plot: PNGs of the monitor's path and of pass rates by harness revision (matplotlib, Agg backend).

Names load on first use (PEP 562): importing the package does not import matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AppliedEdit": "lousho.plot.edits",
    "MonitorPath": "lousho.plot.monitor_plot",
    "applied_edit": "lousho.plot.edits",
    "draw_monitor": "lousho.plot.monitor_plot",
    "draw_pass_rates": "lousho.plot.pass_rate_plot",
    "monitor_path": "lousho.plot.monitor_plot",
    "pass_rate_paths": "lousho.plot.pass_rate_plot",
    "watched_edit": "lousho.plot.edits",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lousho.plot' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
