"""The page's queries over the span store, run on a read cursor through the SQL API's read path.

Every query goes through ``sql.run_query`` (one SELECT, the time limit, the row cap), on a cursor of
the daemon's database (``SpanStore.reader``): the writer thread stays the only writer. Values bind as
parameters, never into the SQL text. Runs are one row each from ``runs_select`` narrowed *before* it
aggregates, so one agent's page does not aggregate everyone's runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb

from lousho.observe.runs.runs_view import newest_runs_query, runs_select
from lousho.observe.sql import query as sql_api

if TYPE_CHECKING:
    import polars as pl

    from lousho.analysis.monitor import Arm, MonitorConfig
    from lousho.improve.applied_edit import AppliedEdit

RUN_COLUMNS = (
    "run_id, agent, harness_revision, case_id, status, passed, attempts, started_ns, duration_s, "
    "input_tokens, output_tokens, cost_usd, model_calls, tool_calls, error_type, error_message, probe, "
    "healed_from"
)
# Bins of equal run counts per revision in the pass-rate chart.
PASS_RATE_BINS = 12
# Revisions in the pass-rate chart and table: those with the newest runs.
CHART_REVISIONS = 20
# What a list shows of a long error message; the run's own page has the whole.
_LISTED_RUN_COLUMNS = RUN_COLUMNS.replace("error_message", "left(error_message, 200) AS error_message")
# A run's span tree shows this many spans a page, in start order; more spans make more pages.
SPANS_PER_PAGE = 500
# A run's scores listed on its page; a run with more says so.
MAX_SCORES = 500
# The run's input, output and error as the page shows them: cut in the query, not after it.
EXCERPT_CHARS = 2000


@dataclass
class Reader:
    """Runs checked queries on one cursor, or through ``query`` (the fleet's lake: ``--page-scope lake``); ``close``
    when done."""

    con: duckdb.DuckDBPyConnection | None
    timeout: float
    query: Callable[[str, list[Any] | None, int], sql_api.QueryResult] | None = None

    @classmethod
    def open(cls, factory: Callable[[], duckdb.DuckDBPyConnection], timeout: float) -> Reader:
        return cls(factory(), timeout)

    def fetch(self, query: str, params: list[Any] | None = None, max_rows: int = 1_000_000) -> sql_api.QueryResult:
        if self.query is not None:
            return self.query(query, params, max_rows)
        assert self.con is not None
        return sql_api.run_query(self.con, query, params, timeout=self.timeout, max_rows=max_rows)

    def rows(self, query: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        return self.fetch(query, params).table.to_pylist()

    def close(self) -> None:
        if self.con is not None:
            self.con.close()


def agents(reader: Reader, registered: list[str], limit: int, offset: int) -> list[dict[str, Any]]:
    """One page of agents by name: those with runs (any run: ``lousho.run.id`` or a standard GenAI trace)
    and the ``registered`` ones without: name, runs, newest run start, and ``total`` (all pages)."""
    return reader.rows(
        "WITH seen AS (SELECT agent, count(*) AS runs, max(started_ns) AS last_ns FROM runs "
        "WHERE agent IS NOT NULL GROUP BY agent), named AS (SELECT DISTINCT unnest(?::VARCHAR[]) AS agent) "
        "SELECT agent, coalesce(runs, 0) AS runs, last_ns, count(*) OVER () AS total "
        "FROM seen FULL JOIN named USING (agent) ORDER BY agent LIMIT ? OFFSET ?", [registered, limit, offset])


def agent_names(reader: Reader) -> list[str]:
    """The agent names spans carry: one column scan, no count (the runs list asks this on every load)."""
    # A run's agent is its root's name, else its service's (runs_view): those spans are the ones to read.
    rows = reader.rows("SELECT DISTINCT coalesce(agent_name, service_name) AS agent FROM spans "
                       "WHERE coalesce(agent_name, service_name) IS NOT NULL AND (run_id IS NOT NULL OR "
                       "operation = 'invoke_agent' OR parent_span_id IS NULL) ORDER BY agent LIMIT 1000")
    return [r["agent"] for r in rows]


def revisions(reader: Reader, agent: str | None) -> list[str]:
    """Harness revisions, newest first (of ``agent`` when given)."""
    # Over the kept runs, not the spans: a revision may be derived (``auto:``) from the run's spans.
    where, params = ("AND agent = ?", [agent]) if agent else ("", [])
    rows = reader.rows(
        f"SELECT harness_revision AS revision, max(started_ns) AS last_ns FROM runs "
        f"WHERE harness_revision IS NOT NULL {where} GROUP BY harness_revision ORDER BY last_ns DESC LIMIT 500",
        params)
    return [r["revision"] for r in rows]


def newest_runs(reader: Reader, *, agent: str | None, revision: str | None, failed: bool,
                limit: int, offset: int = 0) -> list[dict[str, Any]]:
    """Up to ``limit`` runs matching the filters after the ``offset`` newest, newest first (the order ends
    with the run id: stable across pages). Failed: errored or failed its check."""
    query, params = newest_runs_query(_LISTED_RUN_COLUMNS, agent=agent, revision=revision, failed=failed,
                                      limit=limit)
    return reader.rows(query + " OFFSET ?", [*params, offset])


def run_detail(reader: Reader, run_id: str, span_offset: int = 0) -> tuple[
        dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's row (input, output and error cut to ``EXCERPT_CHARS``, with their lengths), one page of the
    spans of every trace it has (oldest first; one more than a page when there are more) and its scores
    (``MAX_SCORES`` and one more at most)."""
    cut = ", ".join(f"left({c}, {EXCERPT_CHARS}) AS {c}, length({c}) AS {c}_chars"
                    for c in ("input", "output", "error_message"))
    columns = RUN_COLUMNS.replace("error_message, ", "")
    found = reader.rows(f"SELECT {columns}, {cut}, conversation_id, model, last_trace_id "
                        f"FROM ({runs_select('run_id = ?')})", [run_id])
    if not found:
        return None, [], []
    # A run without lousho.run.id is its one trace, the last (and only) one the row names.
    traces = "SELECT DISTINCT trace_id FROM spans WHERE run_id = ? UNION SELECT ?"
    last = found[0]["last_trace_id"]
    spans = reader.rows(
        "SELECT trace_id, span_id, parent_span_id, left(name, 500) AS name, kind, operation, status_code, "
        f"left(status_message, {EXCERPT_CHARS + 1}) AS status_message, start_ns, end_ns, duration_ns, "
        "left(request_model, 500) AS request_model, left(tool_name, 500) AS tool_name, input_tokens, output_tokens, "
        "cost_usd, left(error_type, 500) AS error_type, attributes::VARCHAR AS attributes, events::VARCHAR AS events "
        f"FROM spans WHERE trace_id IN ({traces}) ORDER BY start_ns, span_id, trace_id LIMIT ? OFFSET ?",
        [run_id, last, SPANS_PER_PAGE + 1, span_offset])
    scores = reader.rows(
        "SELECT trace_id, span_id, name, score_value, score_label, passed, failed_check, explanation, time_ns "
        f"FROM scores WHERE trace_id IN ({traces}) ORDER BY time_ns, seq LIMIT ?", [run_id, last, MAX_SCORES + 1])
    return found[0], spans, scores


def run_value(reader: Reader, run_id: str, which: str) -> tuple[bool, str | None]:
    """The whole ``input``, ``output`` or ``error_message`` of a run: (the run exists, the value)."""
    assert which in ("input", "output", "error_message")
    found = reader.rows(f"SELECT {which} AS value FROM ({runs_select('run_id = ?')})", [run_id])
    return bool(found), found[0]["value"] if found else None


def span_values(reader: Reader, trace_id: str, span_id: str, column: str) -> tuple[bool, str | None]:
    """A span's ``attributes`` or ``events`` as the store's JSON text: (the span exists, the text)."""
    assert column in ("attributes", "events")
    found = reader.rows(f"SELECT {column}::VARCHAR AS value FROM spans WHERE trace_id = ? AND span_id = ? LIMIT 1",
                        [trace_id, span_id])
    return bool(found), found[0]["value"] if found else None


def pass_rate_bins(reader: Reader, agent: str) -> list[dict[str, Any]]:
    """Scored non-probe runs of ``agent`` by (revision, run-index bin): scored, passes, first and last start.

    Only the ``CHART_REVISIONS`` revisions with the newest runs (``revisions`` counts them all). Each
    revision's runs, in start order, split into ``PASS_RATE_BINS`` bins of equal run counts (one run
    a bin when it has fewer); revisions come in the order of their first run. Binning by run index, not
    by time, keeps two revisions days apart side by side instead of at the chart's two edges. Probe runs
    (the improve loop's own) are not live traffic and stay out, as in analysis' pass rates.
    """
    return reader.rows(
        f"""
        WITH r AS (
            SELECT harness_revision, passed, started_ns FROM ({runs_select('agent_name = ?')})
            WHERE agent = ? AND NOT probe AND passed IS NOT NULL AND harness_revision IS NOT NULL
        ), newest AS (
            SELECT harness_revision FROM r GROUP BY harness_revision
            ORDER BY max(started_ns) DESC, harness_revision LIMIT ?
        ), numbered AS (
            SELECT *, row_number() OVER (PARTITION BY harness_revision ORDER BY started_ns) - 1 AS i,
                count(*) OVER (PARTITION BY harness_revision) AS n,
                min(started_ns) OVER (PARTITION BY harness_revision) AS revision_first_ns
            FROM r WHERE harness_revision IN (SELECT harness_revision FROM newest)
        )
        SELECT harness_revision AS revision, (i * ? // n)::BIGINT AS bin,
            count(*) AS scored, sum(passed::INTEGER)::BIGINT AS passes,
            min(started_ns) AS first_ns, max(started_ns) AS last_ns, any_value(revision_first_ns) AS revision_first_ns,
            (SELECT count(DISTINCT harness_revision) FROM r) AS revisions
        FROM numbered GROUP BY ALL ORDER BY revision_first_ns, revision, bin
        """, [agent, agent, CHART_REVISIONS, PASS_RATE_BINS])


def revision_clusters(reader: Reader, agent: str, revisions: list[str]) -> dict[str, dict[str, Any]]:
    """Per revision of ``revisions``: its scored non-probe runs' clusters (a session, else a case, else the
    run) and what ``clustered.interval_from_cluster_sums`` needs of them: runs, passes, the number of
    clusters, the sums of their squared and fourth-power residual sums and of their squared sizes
    (``analysis.pass_rates``' interval).
    """
    rows = reader.rows(
        """
        WITH c AS (
            SELECT harness_revision, count(*) AS n, sum(passed::INTEGER) AS x FROM runs
            WHERE agent = ? AND NOT probe AND passed IS NOT NULL AND harness_revision IN (SELECT unnest(?::VARCHAR[]))
            GROUP BY harness_revision, coalesce('s:' || conversation_id, 'c:' || case_id, 'r:' || run_id)
        ), r AS (
            SELECT *, x - n * sum(x) OVER (PARTITION BY harness_revision) / sum(n) OVER (PARTITION BY harness_revision)
                AS residual FROM c
        )
        SELECT harness_revision AS revision, sum(n)::BIGINT AS scored, sum(x)::BIGINT AS passes,
            count(*) AS clusters, sum(residual ^ 2)::DOUBLE AS s2, sum(residual ^ 4)::DOUBLE AS s4,
            sum(n::DOUBLE ^ 2) AS m2
        FROM r GROUP BY harness_revision
        """, [agent, revisions])
    return {row["revision"]: row for row in rows}


class ReaderStore:
    """The page's read cursor as the ``StoreClient`` the live monitor reads through, so the page draws the
    arms the watcher decides on (``Monitor.arms``), each query under the page's checks and time limit."""

    target = "the page's read cursor"

    def __init__(self, reader: Reader) -> None:
        self._reader = reader

    def fetch(self, query: str, params: list[Any] | None = None) -> sql_api.QueryResult:
        return self._reader.fetch(query, params, max_rows=2**62)

    def sql(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        import polars as pl

        frame = pl.from_arrow(self.fetch(query, params).table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    frame = sql

    def close(self) -> None:
        """The page closes its reader itself."""


def monitor_arms(reader: Reader, agent: str, edit: AppliedEdit, config: MonitorConfig) -> tuple[str, Arm, Arm]:
    """(the design the watch runs in, the base arm, the applied arm), read as the live monitor reads them, with
    the design and holdback the watch recorded (``AppliedEdit.monitor``)."""
    return edit.monitor(ReaderStore(reader), agent, config).arms()
