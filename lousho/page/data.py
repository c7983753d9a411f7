"""The page's queries over the span store, run on a read cursor through the SQL API's read path.

Every query goes through ``sql.run_query`` (one SELECT, the time limit, the row cap), on a cursor of
the daemon's database (``SpanStore.reader``): the writer thread stays the only writer. Values bind as
parameters, never into the SQL text. Runs are one row each from ``runs_select`` narrowed *before* it
aggregates, so one agent's page does not aggregate everyone's runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb

from lousho.observe import sql as sql_api
from lousho.observe.runs_view import newest_runs_query, runs_select

RUN_COLUMNS = (
    "run_id, agent, harness_revision, case_id, status, passed, attempts, started_ns, duration_s, "
    "input_tokens, output_tokens, cost_usd, model_calls, tool_calls, error_type, error_message, probe, "
    "healed_from"
)
# Bins of equal run counts per revision in the pass-rate chart.
PASS_RATE_BINS = 12
# A run's span tree stops here; a run with more spans says so.
MAX_SPANS = 2000
# The monitor's last look: the base side keeps this many runs before the apply.
LAST_LOOK = 60


@dataclass
class Reader:
    """Runs checked queries on one cursor; ``close`` when done."""

    con: duckdb.DuckDBPyConnection
    timeout: float

    @classmethod
    def open(cls, factory: Callable[[], duckdb.DuckDBPyConnection], timeout: float) -> Reader:
        return cls(factory(), timeout)

    def rows(self, query: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        return sql_api.run_query(self.con, query, params, timeout=self.timeout).table.to_pylist()

    def close(self) -> None:
        self.con.close()


def agents(reader: Reader) -> list[dict[str, Any]]:
    """Agents with runs (any run: ``lousho.run.id`` or a standard GenAI trace): name, runs, newest run start."""
    return reader.rows(
        "SELECT agent, count(*) AS runs, max(started_ns) AS last_ns FROM runs "
        "WHERE agent IS NOT NULL GROUP BY agent ORDER BY agent")


def agent_names(reader: Reader) -> list[str]:
    """The agent names spans carry: one column scan, no count (the runs list asks this on every load)."""
    # A run's agent is its root's name, else its service's (runs_view): those spans are the ones to read.
    rows = reader.rows("SELECT DISTINCT coalesce(agent_name, service_name) AS agent FROM spans "
                       "WHERE coalesce(agent_name, service_name) IS NOT NULL AND (run_id IS NOT NULL OR "
                       "operation = 'invoke_agent' OR parent_span_id IS NULL) ORDER BY agent LIMIT 1000")
    return [r["agent"] for r in rows]


def revisions(reader: Reader, agent: str | None) -> list[str]:
    """Harness revisions, newest first (of ``agent`` when given)."""
    where, params = ("AND agent_name = ?", [agent]) if agent else ("", [])
    rows = reader.rows(
        f"SELECT harness_revision AS revision, max(start_ns) AS last_ns FROM spans "
        f"WHERE harness_revision IS NOT NULL {where} GROUP BY harness_revision ORDER BY last_ns DESC LIMIT 500",
        params)
    return [r["revision"] for r in rows]


def newest_runs(reader: Reader, *, agent: str | None, revision: str | None, failed: bool,
                limit: int) -> list[dict[str, Any]]:
    """The ``limit`` newest runs matching the filters, newest first. Failed: errored or failed its check."""
    return reader.rows(*newest_runs_query(RUN_COLUMNS, agent=agent, revision=revision, failed=failed, limit=limit))


def run_detail(reader: Reader, run_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]],
                                                     list[dict[str, Any]]]:
    """The run's row, the spans of every trace it has (oldest first) and their scores."""
    found = reader.rows(f"SELECT {RUN_COLUMNS}, input, output, conversation_id, model, last_trace_id "
                        f"FROM ({runs_select('run_id = ?')})", [run_id])
    if not found:
        return None, [], []
    # A run without lousho.run.id is its one trace, the last (and only) one the row names.
    traces = "SELECT DISTINCT trace_id FROM spans WHERE run_id = ? UNION SELECT ?"
    last = found[0]["last_trace_id"]
    spans = reader.rows(
        "SELECT trace_id, span_id, parent_span_id, name, kind, operation, status_code, status_message, "
        "start_ns, end_ns, duration_ns, request_model, tool_name, input_tokens, output_tokens, cost_usd, "
        "error_type, attributes::VARCHAR AS attributes, events::VARCHAR AS events "
        f"FROM spans WHERE trace_id IN ({traces}) ORDER BY start_ns, span_id LIMIT ?", [run_id, last, MAX_SPANS + 1])
    scores = reader.rows(
        "SELECT trace_id, span_id, name, score_value, score_label, passed, failed_check, explanation, time_ns "
        f"FROM scores WHERE trace_id IN ({traces}) ORDER BY time_ns, seq", [run_id, last])
    return found[0], spans, scores


def pass_rate_bins(reader: Reader, agent: str) -> list[dict[str, Any]]:
    """Scored non-probe runs of ``agent`` by (revision, run-index bin): scored, passes, first and last start.

    Each revision's runs, in start order, split into ``PASS_RATE_BINS`` bins of equal run counts (one run
    a bin when it has fewer); revisions come in the order of their first run. Binning by run index, not
    by time, keeps two revisions days apart side by side instead of at the chart's two edges. Probe runs
    (the improve loop's own) are not live traffic and stay out, as in analysis' pass rates.
    """
    return reader.rows(
        f"""
        WITH r AS (
            SELECT harness_revision, passed, started_ns FROM ({runs_select('agent_name = ?')})
            WHERE agent = ? AND NOT probe AND passed IS NOT NULL AND harness_revision IS NOT NULL
        ), numbered AS (
            SELECT *, row_number() OVER (PARTITION BY harness_revision ORDER BY started_ns) - 1 AS i,
                count(*) OVER (PARTITION BY harness_revision) AS n,
                min(started_ns) OVER (PARTITION BY harness_revision) AS revision_first_ns
            FROM r
        )
        SELECT harness_revision AS revision, (i * ? // n)::BIGINT AS bin,
            count(*) AS scored, sum(passed::INTEGER)::BIGINT AS passes,
            min(started_ns) AS first_ns, max(started_ns) AS last_ns, any_value(revision_first_ns) AS revision_first_ns
        FROM numbered GROUP BY ALL ORDER BY revision_first_ns, revision, bin
        """, [agent, agent, PASS_RATE_BINS])


def monitor_outcomes(reader: Reader, agent: str, before: str, after: str,
                     applied_ns: int) -> tuple[list[bool], list[bool]]:
    """As the live monitor reads them: the newest ``LAST_LOOK`` scored non-probe runs of ``before`` that
    started before the apply, and the scored non-probe runs of ``after`` from the apply on (at most
    ``LAST_LOOK``), each oldest first."""
    base = reader.rows(
        f"SELECT passed FROM ({runs_select('agent_name = ? AND harness_revision = ?')}) "
        "WHERE agent = ? AND harness_revision = ? AND NOT probe AND passed IS NOT NULL AND started_ns < ? "
        "ORDER BY started_ns DESC, run_id DESC LIMIT ?", [agent, before, agent, before, applied_ns, LAST_LOOK])
    applied = reader.rows(
        f"SELECT passed FROM ({runs_select('agent_name = ? AND harness_revision = ? AND start_ns >= ?')}) "
        "WHERE agent = ? AND harness_revision = ? AND NOT probe AND passed IS NOT NULL AND started_ns >= ? "
        "ORDER BY started_ns, run_id LIMIT ?",
        [agent, after, applied_ns, agent, after, applied_ns, LAST_LOOK])
    return [bool(r["passed"]) for r in reversed(base)], [bool(r["passed"]) for r in applied]
