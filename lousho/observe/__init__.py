"""observe: the OTLP daemon, the DuckDB span store and its SQL API, and the agent-side helpers.

Names load on first use (PEP 562): an agent importing the export helper does not load the query stack
(DuckDB, Polars, PyArrow), and `lousho sql --url` does not load the OTel SDK.
"""

from __future__ import annotations

from lousho.kernel._lazy import lazy_exports

_EXPORTS = {
    "AgentRun": "lousho.observe.client.agent_run",
    "agent_run": "lousho.observe.client.agent_run",
    "DaemonConfig": "lousho.observe.config",
    "StoreClient": "lousho.observe.client.store_client",
    "connect": "lousho.observe.client.store_client",
    "instrument": "lousho.observe.client.export",
    "record_score": "lousho.observe.client.export",
}

__all__, __getattr__ = lazy_exports("lousho.observe", _EXPORTS)
