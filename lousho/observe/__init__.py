"""observe: the OTLP daemon, the DuckDB span store and its SQL API, and the agent-side helpers.

Names load on first use (PEP 562): an agent importing the export helper does not load the query stack
(DuckDB, Polars, PyArrow), and `lousho sql --url` does not load the OTel SDK.
"""

from __future__ import annotations

from lousho._lazy import lazy_exports

_EXPORTS = {
    "AgentRun": "lousho.observe.agent_run",
    "agent_run": "lousho.observe.agent_run",
    "DaemonConfig": "lousho.observe.config",
    "StoreClient": "lousho.observe.client",
    "connect": "lousho.observe.client",
    "instrument": "lousho.observe.export",
    "record_score": "lousho.observe.export",
}

__all__, __getattr__ = lazy_exports("lousho.observe", _EXPORTS)
