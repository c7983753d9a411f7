"""The SQL of one row per run, as the ``runs`` view and as a query filtered before it aggregates.

What makes a run (docs/observe.md, "What makes a run"):

* A span carrying ``lousho.run.id`` (column ``run_id``) makes its trace part of that run, exactly as
  before: a run spans one trace per attempt (each resume is a new trace); its root in a trace is the
  earliest span carrying the run id; status, error and output are the last attempt's (``arg_max_null``:
  a NULL there is the answer), the verdict the last scored attempt's.
* A trace with no such span is one run of its own: its root is the outermost ``invoke_agent`` span,
  else the trace's root span (a bare ``chat`` span is a run of one call). Its id is the framework's
  own per-invocation id on that root (Pydantic AI's ``gen_ai.agent.call.id``, column ``call_id``),
  else the trace id; its agent the root's agent name, else the first agent a span of the trace declares
  (OpenInference's ``agent.name`` under the Agents SDK's "Agent workflow", a LlamaIndex workflow event's
  ``current_agent_name``), else a name the root's span
  name gives (an agent span's name, LlamaIndex's ``FunctionAgent.run``: ``AGENT_HINT``), else the
  resource's ``service.name``; it failed when its root ended in ERROR (an ERROR span under an ok root
  was handled: ``handled_errors``); its input is the first user message of its spans, its output the
  last assistant message, and without ``lousho.case.id`` its case is a hash of that input.

Tokens, cost and calls add up over all of a run's traces; a failing score fails any run. A request to a
model counts once: a model span nested directly in another (an SDK instrumentation's span under a framework's)
is part of that call, and LlamaIndex's ``_prepare_chat_with_tools`` beside its chat call is none (``model_calls``).
A failed run's ``error_type`` is the error's type as sent, else one its message starts with
(``ValueError: ...``, a traceback's last line), else ``error``; an ok run has no error type or message.
A run without ``lousho.harness.revision`` or ``gen_ai.agent.version`` takes ``auto:`` and the fingerprint of
what its agent sent (fingerprint.py: the first model call's instructions, tools and model);
``revision_source`` says which: tagged, version, derived, or none (nothing to fingerprint: NULL).

``runs_select()`` is the definition of the ``runs`` rows. The store answers the name ``runs`` from
kept tables merged with the spans not yet folded into them (runs_table.py, which reuses
``RUN_AGGREGATE``); this definition stays the oracle its tests compare against.
``runs_select(run_filter)`` narrows the runs *before* the aggregation (the filter is a condition on
the span columns of the spans that make a run: those with a run id, and the roots of the others,
e.g. ``agent_name = ?``), so asking for one agent's runs does not aggregate everyone's.
"""

from __future__ import annotations

from typing import Any

# A model span requests the model, except LlamaIndex's ``_prepare_chat_with_tools``: an LLM span (every abstract
# method of an LLM is traced) that only builds the request, beside the chat call that sends it.
MODEL_OPERATIONS = ("(operation IN ('chat', 'text_completion', 'generate_content') "
                    "AND NOT ends_with(name, '._prepare_chat_with_tools'))")
# What a candidate root's span name says of its agent when no span declares one: an agent span's own name,
# or the class of a LlamaIndex workflow's run (span "FunctionAgent.run").
AGENT_HINT = (r"CASE WHEN operation = 'invoke_agent' THEN name "
              r"WHEN regexp_matches(name, '^[A-Z][A-Za-z0-9_]*\.a?run$') THEN split_part(name, '.', 1) END")
# A model span with its parent, for ``model_calls``.
MODEL_SPAN = "struct_pack(id := span_id, parent := parent_span_id)"


def model_calls(spans: str) -> str:
    """The requests to a model among ``spans`` (a list of ``MODEL_SPAN``): those not nested in another."""
    return (f"coalesce(len(list_filter({spans}, lambda s: s IS NOT NULL AND (s.parent IS NULL "
            f"OR NOT list_contains(list_transform({spans}, lambda x: x.id), s.parent)))), 0)")


# The openai SDK's class for an HTTP error status (openai._client._make_status_error; other statuses under 500
# are APIStatusError). Its message names only the status ("Error code: 500 - {...}"), and that message is all
# the Agents SDK's instrumentation sends of a failed model call ("Error in agent run: {'error': 'Error code:
# 500 - ...'}", no exception event): the class tells a rate limit from a server error.
OPENAI_STATUS_ERRORS = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
                        404: "NotFoundError", 409: "ConflictError", 422: "UnprocessableEntityError",
                        429: "RateLimitError"}


def _error_type(kind: str, message: str, status: str) -> str:
    """A failed run's error type: ``kind`` as sent, else the exception type ``message`` starts with (a
    traceback's last line), else the openai SDK's class for the HTTP status it names, else ``error``. An ok run
    has none: an error its agent handled is counted in ``handled_errors`` and shown on its span, not as the run's."""
    line = (f"CASE WHEN starts_with({message}, 'Traceback') "
            rf"THEN regexp_extract({message}, '([^\n]+)\s*$', 1) ELSE {message} END")
    parsed = rf"nullif(regexp_extract({line}, '^\s*((?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?::|\(|$)', 1), '')"
    code = rf"nullif(regexp_extract({message}, 'Error code: ([1-5][0-9][0-9])\b', 1), '')::INTEGER"
    named = " ".join(f"WHEN {status_code} THEN '{name}'" for status_code, name in OPENAI_STATUS_ERRORS.items())
    http = (f"CASE {code} {named} ELSE CASE WHEN {code} >= 500 THEN 'InternalServerError' "
            f"WHEN {code} >= 400 THEN 'APIStatusError' END END")
    return f"CASE WHEN {status} = 'error' THEN coalesce({kind}, {parsed}, {http}, 'error') END"


_TEMPLATE = """
WITH candidates AS (
    SELECT trace_id, span_id, start_ns, operation, call_id, agent_name, service_name, harness_revision,
        case_id, conversation_id, probe, traffic_arm, status_code, status_message, error_type,
        {agent_hint} AS agent_hint
    FROM spans
    WHERE run_id IS NULL AND (operation = 'invoke_agent' OR parent_span_id IS NULL)
        AND trace_id NOT IN (SELECT trace_id FROM spans WHERE run_id IS NOT NULL)
), heads AS (
    SELECT * FROM candidates
    WHERE operation = 'invoke_agent'
        OR trace_id NOT IN (SELECT trace_id FROM candidates WHERE operation = 'invoke_agent')
), trace_runs AS (
    SELECT trace_id, coalesce(arg_min(call_id, start_ns), trace_id) AS run_id FROM heads GROUP BY trace_id
), tagged AS (
    SELECT run_id, trace_id, start_ns, agent_name, service_name, harness_revision, case_id, conversation_id,
        run_kind, healed_from, probe, traffic_arm, status_code, status_message, error_type, input, output,
        NULL AS agent_hint, false AS implicit
    FROM spans WHERE run_id IS NOT NULL
    UNION ALL
    SELECT r.run_id, h.trace_id, h.start_ns, h.agent_name,
        h.service_name, h.harness_revision, h.case_id, h.conversation_id, NULL AS run_kind,
        NULL AS healed_from, h.probe, h.traffic_arm, h.status_code, h.status_message, h.error_type,
        NULL AS input, NULL AS output, h.agent_hint, true AS implicit
    FROM heads h JOIN trace_runs r USING (trace_id)
), run_ids AS (
    SELECT DISTINCT run_id FROM tagged WHERE true {run_filter}
), attempt AS (
    SELECT run_id, trace_id,
        min(start_ns) AS start_ns,
        arg_min(agent_name, start_ns) AS agent_name,
        arg_min(service_name, start_ns) AS service_name,
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
        arg_min(output, start_ns) AS output,
        arg_min(agent_hint, start_ns) AS agent_hint,
        bool_or(implicit) AS implicit
    FROM tagged
    WHERE true {attempt_filter}
    GROUP BY run_id, trace_id
), per_trace AS (
    SELECT trace_id,
        max(end_ns) AS end_ns,
        sum(input_tokens) AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cache_read_tokens) AS cache_read_tokens,
        sum(cache_creation_tokens) AS cache_creation_tokens,
        sum(reasoning_tokens) AS reasoning_tokens,
        sum(cost_usd) AS cost_usd,
        count(*) FILTER (WHERE cost_source = 'reported') AS reported_costs,
        count(*) FILTER (WHERE cost_source = 'price-table') AS priced_costs,
        {model_calls} AS model_calls,
        count(*) FILTER (WHERE operation = 'execute_tool') AS tool_calls,
        arg_min(agent_name, start_ns) AS first_agent,
        arg_min(coalesce(request_model, response_model), start_ns) AS first_model,
        arg_min(provider, start_ns) AS first_provider,
        arg_min(conversation_id, start_ns) AS first_conversation_id,
        list(DISTINCT skill_name) FILTER (WHERE skill_name IS NOT NULL) AS skills,
        bool_or(status_code = 'ERROR' AND operation = 'invoke_agent' AND agent_name IS NOT NULL) AS agent_error,
        arg_min(input_text, start_ns) AS first_input_text,
        arg_max(output_text, end_ns) AS last_output_text,
        arg_max(error_type, end_ns) FILTER (WHERE status_code = 'ERROR') AS last_error_type,
        arg_max(status_message, end_ns) FILTER (WHERE status_code = 'ERROR') AS last_error_message,
        count(*) FILTER (WHERE status_code = 'ERROR') AS error_spans,
        arg_min(fingerprint, start_ns) FILTER (WHERE {model_operations}) AS model_print,
        arg_min(fingerprint, start_ns) AS any_print,
        arg_min(harness_revision, start_ns) FILTER (WHERE revision_source = 'version') AS version_revision
    FROM spans
    WHERE trace_id IN (SELECT trace_id FROM attempt)
    GROUP BY trace_id
), verdict AS (
    SELECT trace_id, bool_and(passed) AS passed
    FROM scores WHERE passed IS NOT NULL {verdict_filter}
    GROUP BY trace_id
), {run_aggregate}
"""


# The run from its attempts: the CTEs ``attempt`` (one row per run and trace), ``per_trace`` and
# ``verdict`` (one row per trace) in, one row per run out. The kept runs (runs_table.py) feed it the
# same CTEs from their partial aggregates.
_RUN = """run AS (
    SELECT a.*, t.* EXCLUDE (trace_id),
        CASE WHEN a.implicit THEN t.first_input_text ELSE a.input END AS run_input,
        CASE WHEN a.implicit THEN t.last_output_text ELSE a.output END AS run_output,
        -- The run's own span says how it ended, or an agent span under it that ended in ERROR (the Agents
        -- SDK's instrumentation ends its "Agent workflow" root OK whatever happened in the agent under it):
        -- another ERROR span that the framework handled (a tool's error given back to the model) leaves the
        -- run ok, counted in handled_errors.
        CASE WHEN t.agent_error THEN 'ERROR' ELSE a.status_code END AS run_status,
        coalesce(t.model_print, t.any_print) AS run_print,
        v.passed AS trace_passed
    FROM attempt a
    JOIN per_trace t USING (trace_id)
    LEFT JOIN verdict v USING (trace_id)
)"""
_RUN_ROW = """
    run_id,
    arg_max(coalesce(agent_name, first_agent, agent_hint, service_name), start_ns) AS agent,
    coalesce(arg_max(harness_revision, start_ns), 'auto:' || arg_max(run_print, start_ns)) AS harness_revision,
    arg_max(coalesce(case_id, CASE WHEN implicit AND run_input IS NOT NULL
        THEN 'input:' || md5(lower(regexp_replace(trim(run_input), '\\s+', ' ', 'g'))) END), start_ns) AS case_id,
    arg_max(coalesce(conversation_id, first_conversation_id), start_ns) AS conversation_id,
    arg_max(run_kind, start_ns) AS run_kind,
    count(*) AS attempts,
    make_timestamp(min(start_ns) // 1000) AS started_at,
    make_timestamp(max(end_ns) // 1000) AS ended_at,
    (max(end_ns) - min(start_ns)) / 1e9 AS duration_s,
    CASE WHEN arg_max(run_status, start_ns) = 'ERROR' THEN 'error' ELSE 'ok' END AS status,
    arg_max_null(coalesce(error_type, last_error_type), start_ns) AS error_type,
    arg_max_null(coalesce(status_message, last_error_message), start_ns) AS error_message,
    arg_min(run_input, start_ns) AS input,
    arg_max_null(run_output, start_ns) AS output,
    sum(input_tokens)::BIGINT AS input_tokens,
    sum(output_tokens)::BIGINT AS output_tokens,
    sum(cost_usd) AS cost_usd,
    sum(model_calls)::BIGINT AS model_calls,
    sum(tool_calls)::BIGINT AS tool_calls,
    arg_max(first_model, start_ns) AS model,
    arg_max(trace_passed, start_ns) FILTER (WHERE trace_passed IS NOT NULL) AS passed,
    coalesce(bool_or(probe), false) AS probe,
    arg_max(healed_from, start_ns) AS healed_from,
    arg_max(traffic_arm, start_ns) AS traffic_arm,
    arg_max(trace_id, start_ns) AS last_trace_id,
    min(start_ns) AS started_ns,
    arg_max(first_provider, start_ns) AS provider,
    sum(cache_read_tokens)::BIGINT AS cache_read_tokens,
    sum(cache_creation_tokens)::BIGINT AS cache_creation_tokens,
    sum(reasoning_tokens)::BIGINT AS reasoning_tokens,
    CASE WHEN sum(reported_costs) > 0 AND sum(priced_costs) > 0 THEN 'mixed'
        WHEN sum(reported_costs) > 0 THEN 'reported'
        WHEN sum(priced_costs) > 0 THEN 'price-table' END AS cost_source,
    list_sort(list_distinct(flatten(list(skills)))) AS skills,
    bool_or(implicit) AS implicit,
    CASE WHEN arg_max(harness_revision, start_ns) IS NOT NULL THEN
            CASE WHEN arg_max(harness_revision, start_ns) = arg_max(version_revision, start_ns) THEN 'version'
                ELSE 'tagged' END
        WHEN arg_max(run_print, start_ns) IS NOT NULL THEN 'derived' ELSE 'none' END AS revision_source,
    sum(CASE WHEN run_status = 'ERROR' THEN 0 ELSE error_spans END)::BIGINT AS handled_errors
"""
# ``_RUN_ROW`` over a run of one attempt, without aggregating: each aggregate of one row is that row's value
# (``arg_max``'s key, ``start_ns``, is never NULL; ``flatten`` of a NULL list is ``[]``, as of the list of one).
_ONE_ATTEMPT_ROW = """
    run_id,
    coalesce(agent_name, first_agent, agent_hint, service_name) AS agent,
    coalesce(harness_revision, 'auto:' || run_print) AS harness_revision,
    coalesce(case_id, CASE WHEN implicit AND run_input IS NOT NULL
        THEN 'input:' || md5(lower(regexp_replace(trim(run_input), '\\s+', ' ', 'g'))) END) AS case_id,
    coalesce(conversation_id, first_conversation_id) AS conversation_id,
    run_kind,
    1::BIGINT AS attempts,
    make_timestamp(start_ns // 1000) AS started_at,
    make_timestamp(end_ns // 1000) AS ended_at,
    (end_ns - start_ns) / 1e9 AS duration_s,
    CASE WHEN run_status = 'ERROR' THEN 'error' ELSE 'ok' END AS status,
    coalesce(error_type, last_error_type) AS error_type,
    coalesce(status_message, last_error_message) AS error_message,
    run_input AS input,
    run_output AS output,
    input_tokens::BIGINT AS input_tokens,
    output_tokens::BIGINT AS output_tokens,
    cost_usd,
    model_calls::BIGINT AS model_calls,
    tool_calls::BIGINT AS tool_calls,
    first_model AS model,
    trace_passed AS passed,
    coalesce(probe, false) AS probe,
    healed_from,
    traffic_arm,
    trace_id AS last_trace_id,
    start_ns AS started_ns,
    first_provider AS provider,
    cache_read_tokens::BIGINT AS cache_read_tokens,
    cache_creation_tokens::BIGINT AS cache_creation_tokens,
    reasoning_tokens::BIGINT AS reasoning_tokens,
    CASE WHEN reported_costs > 0 AND priced_costs > 0 THEN 'mixed'
        WHEN reported_costs > 0 THEN 'reported'
        WHEN priced_costs > 0 THEN 'price-table' END AS cost_source,
    list_sort(list_distinct(flatten([skills]))) AS skills,
    implicit,
    CASE WHEN harness_revision IS NOT NULL THEN
            CASE WHEN harness_revision = version_revision THEN 'version' ELSE 'tagged' END
        WHEN run_print IS NOT NULL THEN 'derived' ELSE 'none' END AS revision_source,
    (CASE WHEN run_status = 'ERROR' THEN 0 ELSE error_spans END)::BIGINT AS handled_errors
"""
_RUN_COLUMNS = """
SELECT * REPLACE ({error_type} AS error_type, CASE WHEN status = 'error' THEN error_message END AS error_message)
FROM run_rows
""".replace("{error_type}", _error_type("error_type", "error_message", "status"))
RUN_AGGREGATE = f"{_RUN}, run_rows AS (\nSELECT{_RUN_ROW}FROM run\nGROUP BY run_id\n){_RUN_COLUMNS}"
# The same rows with each run of one attempt (nearly every run) taken as it is: aggregating some forty columns of
# every run was two thirds of what the kept runs' fold spent making them (runs_table.py).
RUN_AGGREGATE_ONE_ATTEMPT_APART = f"""{_RUN}, several AS (
    SELECT run_id FROM attempt GROUP BY run_id HAVING count(*) > 1
), run_rows AS (
    SELECT {_ONE_ATTEMPT_ROW} FROM run WHERE run_id NOT IN (SELECT run_id FROM several)
    UNION ALL
    SELECT {_RUN_ROW} FROM run WHERE run_id IN (SELECT run_id FROM several) GROUP BY run_id
){_RUN_COLUMNS}"""


def runs_select(run_filter: str = "") -> str:
    """One row per run; with ``run_filter`` (SQL over span columns), only the runs having a span
    with a run id that matches it. Parameters in the filter bind in the order they appear once."""
    shared = {"agent_hint": AGENT_HINT, "run_aggregate": RUN_AGGREGATE, "model_calls": model_calls(
        f"list({MODEL_SPAN}) FILTER (WHERE {MODEL_OPERATIONS})"), "model_operations": MODEL_OPERATIONS}
    if not run_filter:
        return _TEMPLATE.format(run_filter="", attempt_filter="", verdict_filter="", **shared)
    return _TEMPLATE.format(
        **shared,
        run_filter=f"AND ({run_filter})",
        attempt_filter="AND run_id IN (SELECT run_id FROM run_ids)",
        verdict_filter="AND trace_id IN (SELECT trace_id FROM attempt)",
    )


def newest_runs_query(columns: str, *, agent: str | None = None, revision: str | None = None,
                      failed: bool = False, limit: int) -> tuple[str, list[Any]]:
    """The query for the ``limit`` newest runs (of ``agent``, ``revision``; only failed ones with ``failed``),
    newest first: one query over the kept ``runs`` (runs_table.py), no narrowing window needed."""
    where, params = ["true"], []
    for column, value in (("agent", agent), ("harness_revision", revision)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    if failed:
        where.append("(status = 'error' OR passed = false)")
    return (f"SELECT {columns} FROM runs WHERE {' AND '.join(where)} ORDER BY started_ns DESC, run_id LIMIT ?",
            [*params, limit])
