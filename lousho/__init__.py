"""lousho: a self-healing layer for LLM agents, on OpenTelemetry."""

__version__ = "0.1.0"
