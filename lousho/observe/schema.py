"""The store's tables and views, with a schema version and append-only migrations.

A migration is never edited once released: a change is a new entry at the end of MIGRATIONS.
Views hold no data, so a migration may replace one.
"""

from __future__ import annotations

import duckdb

from lousho.observe.errors import SchemaTooNew

# Columns promoted at ingest, in table order after the identity columns (normalise.ALIASES names).
PROMOTED_TEXT = (
    "operation",
    "agent_name",
    "provider",
    "request_model",
    "response_model",
    "tool_name",
    "conversation_id",
    "error_type",
    "run_id",
    "run_kind",
    "healed_from",
    "harness_revision",
    "case_id",
    "traffic_arm",
    "input",
    "output",
)

_SPANS = """
CREATE TABLE spans (
    span_key UHUGEINT PRIMARY KEY,  -- span_id (high 64 bits) and trace_id's low 64 bits: the dedup key
    trace_id VARCHAR NOT NULL,
    span_id VARCHAR NOT NULL,
    parent_span_id VARCHAR,
    name VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    duration_ns BIGINT NOT NULL,
    status_code VARCHAR NOT NULL,
    status_message VARCHAR,
    service_name VARCHAR,
    scope_name VARCHAR,
    operation VARCHAR,
    agent_name VARCHAR,
    provider VARCHAR,
    request_model VARCHAR,
    response_model VARCHAR,
    tool_name VARCHAR,
    conversation_id VARCHAR,
    input_tokens BIGINT,
    output_tokens BIGINT,
    cost_usd DOUBLE,
    error_type VARCHAR,
    run_id VARCHAR,
    run_kind VARCHAR,
    healed_from VARCHAR,
    harness_revision VARCHAR,
    case_id VARCHAR,
    probe BOOLEAN,
    traffic_arm VARCHAR,
    input VARCHAR,
    output VARCHAR,
    attributes JSON,
    resource JSON,
    events JSON,
    links JSON,
    received_ns BIGINT NOT NULL
)
"""

_SCORES = """
CREATE TABLE scores (
    span_key UHUGEINT NOT NULL,
    seq INTEGER NOT NULL,  -- the event's index in its span: a re-sent span re-sends the same seq
    trace_id VARCHAR NOT NULL,
    span_id VARCHAR NOT NULL,
    run_id VARCHAR,
    name VARCHAR,
    score_value DOUBLE,
    score_label VARCHAR,
    explanation VARCHAR,
    failed_check VARCHAR,
    passed BOOLEAN,
    error_type VARCHAR,
    time_ns BIGINT NOT NULL,
    attributes JSON,
    PRIMARY KEY (span_key, seq)
)
"""

# One row per run id. A run spans one trace per attempt (each resume is a new trace); its root in a
# trace is the earliest span carrying the run id. Tokens, cost and calls add up over all its traces;
# status, error and output are the last attempt's (arg_max_null: a NULL there is the answer), the
# verdict the last scored attempt's.
_RUNS_VIEW = """
CREATE OR REPLACE VIEW runs AS
WITH attempt AS (
    SELECT run_id, trace_id,
        min(start_ns) AS start_ns,
        arg_min(span_id, start_ns) AS root_span_id,
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
    FROM spans WHERE run_id IS NOT NULL
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
    WHERE trace_id IN (SELECT trace_id FROM spans WHERE run_id IS NOT NULL)
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
    sum(t.input_tokens) AS input_tokens,
    sum(t.output_tokens) AS output_tokens,
    sum(t.cost_usd) AS cost_usd,
    sum(t.model_calls) AS model_calls,
    sum(t.tool_calls) AS tool_calls,
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

MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("spans, scores and the runs view", (_SPANS, _SCORES, _RUNS_VIEW)),
)

SCHEMA_VERSION = len(MIGRATIONS)

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS lousho_schema (
    version INTEGER PRIMARY KEY,
    description VARCHAR NOT NULL,
    applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp
)
"""


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """The store's schema version; 0 for a file that has never been migrated."""
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'lousho_schema'"
    ).fetchall()
    if not exists[0][0]:
        return 0
    row = con.execute("SELECT coalesce(max(version), 0) FROM lousho_schema").fetchall()
    return int(row[0][0])


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Apply every migration the store lacks, each in its own transaction; return the version."""
    version = current_version(con)
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"store schema version {version} is newer than this lousho's {SCHEMA_VERSION}"
        )
    con.execute(_VERSION_TABLE)
    for number, (description, statements) in enumerate(MIGRATIONS, start=1):
        if number <= version:
            continue
        con.execute("BEGIN")
        for statement in statements:
            con.execute(statement)
        con.execute(
            "INSERT INTO lousho_schema (version, description) VALUES (?, ?)", [number, description]
        )
        con.execute("COMMIT")
    return SCHEMA_VERSION


def check_readable(con: duckdb.DuckDBPyConnection) -> int:
    """For read-only opens: the version, refusing a store newer than this code."""
    version = current_version(con)
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"store schema version {version} is newer than this lousho's {SCHEMA_VERSION}"
        )
    return version
