"""observe: the OTLP daemon, the DuckDB span store and its SQL API, and the agent-side helpers."""

from lousho.observe.agent_run import AgentRun, agent_run
from lousho.observe.client import StoreClient, connect
from lousho.observe.config import DaemonConfig
from lousho.observe.export import instrument, record_score

__all__ = ["AgentRun", "DaemonConfig", "StoreClient", "agent_run", "connect", "instrument", "record_score"]
