"""The ``runs`` view as migration 1 created it, frozen: a released migration is never edited, and the view of
``runs_view.runs_select`` now reads columns that only migration 2 adds."""

RUNS_VIEW_V1 = """
WITH run_ids AS (
    SELECT DISTINCT run_id FROM spans WHERE run_id IS NOT NULL
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
    WHERE run_id IS NOT NULL
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
    FROM scores WHERE passed IS NOT NULL
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
