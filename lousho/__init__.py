"""lousho: a self-healing layer for LLM agents, on OpenTelemetry."""

__version__ = "0.1.0"

from lousho.kernel._lazy import lazy_exports  # noqa: E402 (after the version: the CLI reads it cheaply)

# Names that load on first use (PEP 562): ``import lousho`` stays free.
__all__, __getattr__ = lazy_exports("lousho", {"harness_revision": "lousho.improve.harness"})
