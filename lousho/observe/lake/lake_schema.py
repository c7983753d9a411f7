"""The lake's tables and views: the local store's, without keys, and a schema version kept in the lake itself.

DuckLake has no primary keys, unique constraints, indexes or sequences, so the tables are the local store's
columns (``span_rows``, ``score_rows``, ``resources``, same names, types and order, but the key kept as its two
64-bit halves) with no constraint; ``spans`` and ``scores`` are views with the local store's columns (``spans``
joined with ``resources`` as there), and ``runs`` and ``sessions`` are computed from the
spans at query time (``runs_view.runs_select``), as the local store answers them over every committed span. A
query, ``lousho runs`` or the Python API's SQL therefore reads the lake as it reads one store.

``lousho_lake_positions`` is append-only: each commit of a daemon adds its new position (the local store's
``commit_seq`` it reached) in the same transaction as its rows. DuckLake retries concurrent appends by itself,
but an update of a row another daemon's transaction touched is a conflict, so nothing here is ever updated.
Migrations are append-only, as the local store's (store/schema.py): a change is a new entry at the end.
"""

from __future__ import annotations

from lousho.observe.runs.runs_view import runs_select
from lousho.observe.runs.sessions_view import sessions_select

# The local store's columns (schema.py, migrations 1-9), in its table order.
SPAN_ROWS = (
    ("span_key", "UHUGEINT"), ("trace_id", "VARCHAR"), ("span_id", "VARCHAR"), ("parent_span_id", "VARCHAR"),
    ("name", "VARCHAR"), ("kind", "VARCHAR"), ("start_ns", "BIGINT"), ("end_ns", "BIGINT"),
    ("duration_ns", "BIGINT"), ("status_code", "VARCHAR"), ("status_message", "VARCHAR"),
    ("service_name", "VARCHAR"), ("scope_name", "VARCHAR"), ("operation", "VARCHAR"), ("agent_name", "VARCHAR"),
    ("provider", "VARCHAR"), ("request_model", "VARCHAR"), ("response_model", "VARCHAR"),
    ("tool_name", "VARCHAR"), ("conversation_id", "VARCHAR"), ("input_tokens", "BIGINT"),
    ("output_tokens", "BIGINT"), ("cost_usd", "DOUBLE"), ("error_type", "VARCHAR"), ("run_id", "VARCHAR"),
    ("run_kind", "VARCHAR"), ("healed_from", "VARCHAR"), ("harness_revision", "VARCHAR"), ("case_id", "VARCHAR"),
    ("probe", "BOOLEAN"), ("traffic_arm", "VARCHAR"), ("input", "VARCHAR"), ("output", "VARCHAR"),
    ("attributes", "JSON"), ("events", "JSON"), ("links", "JSON"), ("received_ns", "BIGINT"),
    ("call_id", "VARCHAR"), ("cache_read_tokens", "BIGINT"), ("cache_creation_tokens", "BIGINT"),
    ("reasoning_tokens", "BIGINT"), ("cost_source", "VARCHAR"), ("skill_name", "VARCHAR"),
    ("input_text", "VARCHAR"), ("output_text", "VARCHAR"), ("commit_seq", "BIGINT"), ("resource_key", "BIGINT"),
    ("fingerprint", "VARCHAR"), ("revision_source", "VARCHAR"),
)
SCORES = (
    ("span_key", "UHUGEINT"), ("seq", "INTEGER"), ("trace_id", "VARCHAR"), ("span_id", "VARCHAR"),
    ("run_id", "VARCHAR"), ("name", "VARCHAR"), ("score_value", "DOUBLE"), ("score_label", "VARCHAR"),
    ("explanation", "VARCHAR"), ("failed_check", "VARCHAR"), ("passed", "BOOLEAN"), ("error_type", "VARCHAR"),
    ("time_ns", "BIGINT"), ("attributes", "JSON"), ("commit_seq", "BIGINT"),
)
RESOURCES = (("resource_key", "BIGINT"), ("resource", "JSON"))
# DuckLake writes a UHUGEINT to Parquet as a DOUBLE (Parquet has no 128-bit integer): the key's low bits would be
# lost. The lake keeps the key as its two 64-bit halves and the views put it together again.
_HALVES = (("key_hi", "UBIGINT"), ("key_lo", "UBIGINT"))
TABLES = {"span_rows": _HALVES + SPAN_ROWS[1:], "score_rows": _HALVES + SCORES[1:], "resources": RESOURCES}
_KEY = "((s.key_hi::UHUGEINT << 64) | s.key_lo::UHUGEINT)"

# The ``spans`` view's columns, as the local store's (schema.py's _SPAN_COLUMNS_6).
_SPAN_VIEW_COLUMNS = tuple(name for name, _ in SPAN_ROWS if name != "resource_key")
_SPANS_VIEW = ("CREATE OR REPLACE VIEW spans AS SELECT "
               + ", ".join("r.resource" if c == "resource" else f"{_KEY} AS span_key" if c == "span_key" else f"s.{c}"
                           for c in (
                   *_SPAN_VIEW_COLUMNS[:34], "resource", *_SPAN_VIEW_COLUMNS[34:]))
               + " FROM span_rows s LEFT JOIN (SELECT resource_key, any_value(resource) AS resource FROM resources "
                 "GROUP BY resource_key) r ON r.resource_key = s.resource_key")


def _create(table: str, columns: tuple[tuple[str, str], ...]) -> str:
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(f'{n} {t}' for n, t in columns)})"


_FIRST = (
    "CREATE TABLE IF NOT EXISTS lousho_lake_schema (version INTEGER, description VARCHAR, applied_ns BIGINT)",
    *(_create(name, columns) for name, columns in TABLES.items()),
    "CREATE TABLE IF NOT EXISTS lousho_lake_positions (daemon VARCHAR, position BIGINT, span_rows BIGINT, "
    "committed_ns BIGINT)",
    _SPANS_VIEW,
    f"CREATE OR REPLACE VIEW scores AS SELECT {_KEY} AS span_key, "
    + ", ".join(f"s.{name}" for name, _ in SCORES[1:]) + " FROM score_rows s",
    f"CREATE OR REPLACE VIEW runs AS {runs_select()}",
    f"CREATE OR REPLACE VIEW sessions AS {sessions_select()}",
)

MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("spans, scores and resources as the local store's (schema 9) without keys; runs and sessions computed from "
     "the spans; each daemon's positions, append-only", _FIRST),
    ("the upkeep's de-duplication of spans that reached the lake twice: how far each run looked, append-only",
     ("CREATE TABLE IF NOT EXISTS lousho_lake_dedup (checked_ns BIGINT, removed BIGINT, at_ns BIGINT)",)),
    ("the de-duplication looks at the rows committed since its last run in the lake's own order (the DuckLake "
     "snapshot that inserted them), not by when a daemon received them: a daemon catching up after an outage "
     "commits rows received long ago",
     ("ALTER TABLE lousho_lake_dedup ADD COLUMN IF NOT EXISTS checked_snapshot BIGINT",)),
)
LAKE_SCHEMA_VERSION = len(MIGRATIONS)

# A commit's statements: the rows the local store committed, as they are there, every column included, the key as
# its halves. Resources another daemon already put in the lake are left out (a race leaves a second copy of the
# same JSON, which the ``spans`` view's GROUP BY makes harmless).
KEY_HALVES = "(span_key >> 64)::UBIGINT AS key_hi, (span_key & 18446744073709551615)::UBIGINT AS key_lo"
SPAN_NAMES = tuple(name for name, _ in SPAN_ROWS[1:])
SCORE_NAMES = tuple(name for name, _ in SCORES[1:])
_SPAN_INSERT = ", ".join(("key_hi", "key_lo", *SPAN_NAMES))
_SCORE_INSERT = ", ".join(("key_hi", "key_lo", *SCORE_NAMES))
INSERTS = (
    ("span_batch", f"INSERT INTO span_rows ({_SPAN_INSERT}) SELECT {_SPAN_INSERT} FROM span_batch"),
    ("score_batch", f"INSERT INTO score_rows ({_SCORE_INSERT}) SELECT {_SCORE_INSERT} FROM score_batch"),
    ("resource_batch", "INSERT INTO resources SELECT b.resource_key, b.resource FROM resource_batch b "
                       "ANTI JOIN resources r ON r.resource_key = b.resource_key"),
)


def migrations() -> list[dict[str, object]]:
    return [{"description": d, "statements": list(s)} for d, s in MIGRATIONS]
