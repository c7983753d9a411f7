"""The SQL of one row per run, as the ``runs`` view and as a query filtered before it aggregates.

A run spans one trace per attempt (each resume is a new trace); its root in a trace is the earliest
span carrying the run id. Tokens, cost and calls add up over all its traces; status, error and
output are the last attempt's (``arg_max_null``: a NULL there is the answer), the verdict the last
scored attempt's.

``runs_select(run_filter)`` narrows the runs *before* the aggregation (the filter is a condition on
the spans that carry a run id, e.g. ``agent_name = ?``), so asking for one agent's runs does not
aggregate everyone's. The view is ``runs_select()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_TEMPLATE = """
WITH run_ids AS (
    SELECT DISTINCT run_id FROM spans WHERE run_id IS NOT NULL {run_filter}
), attempt AS (
    SELECT run_id, trace_id,
        min(start_ns) AS start_ns,
        arg_min(agent_name, start_ns) AS agent_name,
        arg_min(harness_revision, start_ns) AS harness_revision,
        arg_min(case_id, start_ns) AS case_id,
        arg_min(conversation_id, start_ns) AS conversation_id,
        arg_min(run_kind, start_ns) AS run_kind,
        arg_min(healed_from, start_ns) AS healed_from,
        arg_min(probe, start_ns) AS probe,
        arg_min(traffic_arm, start_ns) AS traffic_arm,
        arg_min(status_code, start_ns) AS status_code,
        arg_min(status_message, start_ns) AS status_message,
        arg_min(error_type, start_ns) AS error_type,
        arg_min(input, start_ns) AS input,
        arg_min(output, start_ns) AS output
    FROM spans
    WHERE run_id IS NOT NULL {attempt_filter}
    GROUP BY run_id, trace_id
), per_trace AS (
    SELECT trace_id,
        max(end_ns) AS end_ns,
        sum(input_tokens) AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cost_usd) AS cost_usd,
        count(*) FILTER (WHERE operation IN ('chat', 'text_completion', 'generate_content'))
            AS model_calls,
        count(*) FILTER (WHERE operation = 'execute_tool') AS tool_calls,
        any_value(agent_name) AS any_agent,
        any_value(request_model) AS any_model,
        arg_max(error_type, end_ns) FILTER (WHERE status_code = 'ERROR') AS last_error_type,
        arg_max(status_message, end_ns) FILTER (WHERE status_code = 'ERROR') AS last_error_message
    FROM spans
    WHERE trace_id IN (SELECT trace_id FROM attempt)
    GROUP BY trace_id
), verdict AS (
    SELECT trace_id, bool_and(passed) AS passed
    FROM scores WHERE passed IS NOT NULL {verdict_filter}
    GROUP BY trace_id
)
SELECT
    a.run_id,
    arg_max(coalesce(a.agent_name, t.any_agent), a.start_ns) AS agent,
    arg_max(a.harness_revision, a.start_ns) AS harness_revision,
    arg_max(a.case_id, a.start_ns) AS case_id,
    arg_max(a.conversation_id, a.start_ns) AS conversation_id,
    arg_max(a.run_kind, a.start_ns) AS run_kind,
    count(*) AS attempts,
    make_timestamp(min(a.start_ns) // 1000) AS started_at,
    make_timestamp(max(t.end_ns) // 1000) AS ended_at,
    (max(t.end_ns) - min(a.start_ns)) / 1e9 AS duration_s,
    CASE WHEN arg_max(a.status_code, a.start_ns) = 'ERROR' THEN 'error' ELSE 'ok' END AS status,
    arg_max_null(coalesce(a.error_type, t.last_error_type), a.start_ns) AS error_type,
    arg_max_null(coalesce(a.status_message, t.last_error_message), a.start_ns) AS error_message,
    arg_min(a.input, a.start_ns) AS input,
    arg_max_null(a.output, a.start_ns) AS output,
    sum(t.input_tokens)::BIGINT AS input_tokens,
    sum(t.output_tokens)::BIGINT AS output_tokens,
    sum(t.cost_usd) AS cost_usd,
    sum(t.model_calls)::BIGINT AS model_calls,
    sum(t.tool_calls)::BIGINT AS tool_calls,
    arg_max(t.any_model, a.start_ns) AS model,
    arg_max(v.passed, a.start_ns) FILTER (WHERE v.passed IS NOT NULL) AS passed,
    coalesce(bool_or(a.probe), false) AS probe,
    arg_max(a.healed_from, a.start_ns) AS healed_from,
    arg_max(a.traffic_arm, a.start_ns) AS traffic_arm,
    arg_max(a.trace_id, a.start_ns) AS last_trace_id,
    min(a.start_ns) AS started_ns
FROM attempt a
JOIN per_trace t USING (trace_id)
LEFT JOIN verdict v USING (trace_id)
GROUP BY a.run_id
"""


def runs_select(run_filter: str = "") -> str:
    """One row per run; with ``run_filter`` (SQL over span columns), only the runs having a span
    with a run id that matches it. Parameters in the filter bind in the order they appear once."""
    if not run_filter:
        return _TEMPLATE.format(run_filter="", attempt_filter="", verdict_filter="")
    return _TEMPLATE.format(
        run_filter=f"AND ({run_filter})",
        attempt_filter="AND run_id IN (SELECT run_id FROM run_ids)",
        verdict_filter="AND trace_id IN (SELECT trace_id FROM attempt)",
    )


# How far back `newest_runs_queries` looks first, then wider: the newest runs are found without
# aggregating the whole store, and the answer is exact because the last window is everything.
NEWEST_WINDOWS_NS = tuple(h * 3_600_000_000_000 for h in (1, 24, 24 * 7, 24 * 30)) + (None,)


def newest_runs_queries(newest_ns: int, columns: str, *, agent: str | None = None, revision: str | None = None,
                        failed: bool = False, limit: int) -> Iterator[tuple[str, list[Any]]]:
    """The query for the ``limit`` newest runs (of ``agent``, ``revision``; only failed ones with ``failed``),
    one per widening time window before ``newest_ns``, each narrowed before it aggregates. The caller runs
    them in order and stops at the first that returns ``limit`` rows (or the last)."""
    for window in NEWEST_WINDOWS_NS:
        since = newest_ns - window if window is not None else -(2**63)
        span_filter, params = ["start_ns >= ?"], [since]
        post, post_params = ["started_ns >= ?"], [since]
        for column, post_column, value in (("agent_name", "agent", agent),
                                           ("harness_revision", "harness_revision", revision)):
            if value:
                span_filter.append(f"{column} = ?")
                params.append(value)
                post.append(f"{post_column} = ?")
                post_params.append(value)
        if failed:
            post.append("(status = 'error' OR passed = false)")
        yield (f"SELECT {columns} FROM ({runs_select(' AND '.join(span_filter))}) WHERE {' AND '.join(post)} "
               "ORDER BY started_ns DESC, run_id LIMIT ?", [*params, *post_params, limit])
