"""Say why a runs listing is empty when the store is not: the spans are there, but none makes a run."""

from __future__ import annotations

from lousho.observe.client import StoreClient

DOCS = "docs/observe.md#what-makes-a-run"


def why_no_runs(store: StoreClient, agent: str | None = None) -> str | None:
    """A one-line explanation when the store has spans; None when it has none (nothing was sent yet)."""
    spans = int(store.sql("SELECT count(*) AS n FROM spans")["n"][0])
    if spans == 0:
        return None
    if agent is not None and int(store.sql("SELECT count(*) AS n FROM runs")["n"][0]) > 0:
        return (f"no run of agent {agent!r}; "
                "`lousho sql \"SELECT agent, count(*) FROM runs GROUP BY agent\"` lists the agents")
    return (f"no runs, though the store has {spans} span{'s' if spans != 1 else ''}: a run needs a span with "
            "lousho.run.id, an invoke_agent span or a trace's root span (children whose root never arrived "
            f"make none); see {DOCS}")
