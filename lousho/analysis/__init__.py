"""analysis: runs and cases as Polars frames, statistics with exact operating characteristics.

Names load on first use (PEP 562), so `lousho stats` does not pay for the store client's imports.
"""

from __future__ import annotations

from lousho.kernel._lazy import lazy_exports

_EXPORTS = {
    "Monitor": "lousho.analysis.live_monitor",
    "MonitorConfig": "lousho.analysis.monitor",
    "MonitorDecision": "lousho.analysis.monitor",
    "cases_from_failures": "lousho.analysis.cases",
    "cases_from_recoveries": "lousho.analysis.cases",
    "decide": "lousho.analysis.monitor",
    "live_revision": "lousho.analysis.frames",
    "pass_hat_k": "lousho.analysis.stats",
    "pass_rates": "lousho.analysis.frames",
    "pooled_z": "lousho.analysis.stats",
    "runs": "lousho.analysis.frames",
    "sign_test": "lousho.analysis.stats",
    "wilson_interval": "lousho.analysis.stats",
}

__all__, __getattr__ = lazy_exports("lousho.analysis", _EXPORTS)
