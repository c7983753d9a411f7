"""Say why a runs listing is empty when the store is not: the spans are there, but none makes a run."""

from __future__ import annotations

from lousho.observe.client.store_client import StoreClient

DOCS = "docs/observe.md#what-makes-a-run"


def explain(spans: int, runs: int, agent: str | None = None) -> str | None:
    """One line on an empty runs listing of a store with ``spans`` spans and ``runs`` runs in all; None when
    the store is empty (nothing was sent yet)."""
    if spans == 0:
        return None
    if agent is not None and runs > 0:
        return (f"no run of agent {agent!r}; "
                "`lousho sql \"SELECT agent, count(*) FROM runs GROUP BY agent\"` lists the agents")
    return (f"no runs, though the store has {spans} span{'s' if spans != 1 else ''}: a run needs a span with "
            "lousho.run.id, an invoke_agent span or a trace's root span (children whose root never arrived "
            f"make none); see {DOCS}")


# Whether any run exists, without aggregating them: a span with a run id, an agent span or a root span.
HAS_RUN_SQL = ("SELECT count(*) AS n FROM (SELECT 1 FROM spans WHERE run_id IS NOT NULL OR operation = 'invoke_agent' "
               "OR parent_span_id IS NULL LIMIT 1)")


def why_no_runs(store: StoreClient, agent: str | None = None) -> str | None:
    spans = int(store.sql("SELECT count(*) AS n FROM spans")["n"][0])
    runs = int(store.sql(HAS_RUN_SQL)["n"][0]) if spans and agent is not None else 0
    return explain(spans, runs, agent)
