"""The store's tables and views, with a schema version and append-only migrations.

A migration is never edited once released: a change is a new entry at the end of MIGRATIONS.
Views hold no data, so a migration may replace one, and the first no longer makes the ``runs`` view that
the second replaces anyway (a store made by it keeps that view until its own migration 2 runs).
Since migration 3 ``runs`` and ``sessions`` are
views over kept tables and the spans not folded into them yet (runs_table.py): a change to what makes
a run (``runs_view``, ``runs_parts``) ships with a new migration that runs ``runs_table.REBUILD``.
The ``runs`` and ``sessions`` views over the kept tables are made by ``migrate`` itself, once, after the
migrations (those running REBUILD leave them out: an older one, run on a new store, would bind them to
columns a later migration adds, and each binding costs about 30 ms), at the store's fold watermark
(``runs_table.views``), and at any open that finds them missing. So a migration that changes only what a
view reads (11) need not refold the store, and one that fails leaves no store without them past the next
writable open. (Migrations 2 and 3 made them once; on a store that ran them, ``migrate`` replaces them.)
"""

from __future__ import annotations

import duckdb

from lousho.observe.errors import SchemaTooNew, StoreNotLousho
from lousho.observe.runs import runs_table

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

# Migration 2: what runs, tokens, cost and sessions need from traces that carry no lousho attribute
# (conventions.py fills these columns; older rows keep NULL there).
_GENAI_COLUMNS = tuple(
    f"ALTER TABLE spans ADD COLUMN {name} {kind}"
    for name, kind in (
        ("call_id", "VARCHAR"),
        ("cache_read_tokens", "BIGINT"),
        ("cache_creation_tokens", "BIGINT"),
        ("reasoning_tokens", "BIGINT"),
        ("cost_source", "VARCHAR"),
        ("skill_name", "VARCHAR"),
        ("input_text", "VARCHAR"),
        ("output_text", "VARCHAR"),
    )
)


def _without_key(table: str, not_null: tuple[str, ...]) -> tuple[str, ...]:
    """Rebuild ``table`` with the same columns, in the same order, minus its primary key.

    Written against whatever columns the table has when it runs (CREATE ... AS SELECT), so a migration that
    adds a column before this one is carried over. DuckDB cannot drop a primary key in place; views are bound
    by name, so they answer from the new table.
    """
    lean = f"{table}_lean"
    return (
        f"CREATE TABLE {lean} AS SELECT * FROM {table} LIMIT 0",
        *(f"ALTER TABLE {lean} ALTER COLUMN {column} SET NOT NULL" for column in not_null),
        f"INSERT INTO {lean} SELECT * FROM {table}",
        f"DROP TABLE {table}",
        f"ALTER TABLE {lean} RENAME TO {table}",
    )


# Migration 4: de-duplication moves from the primary keys to the writer's recent-key filter and compaction
# (recent_keys.py, store_compaction.py): an index on random 128-bit keys doubled the cost of every commit.
# ``lousho_compaction`` remembers up to which commit time the spans were checked for duplicates: all of them
# here, as the keys kept them unique until now.
_LEAN_TABLES = (
    *_without_key("spans", ("span_key", "trace_id", "span_id", "name", "kind", "start_ns", "end_ns",
                            "duration_ns", "status_code", "received_ns")),
    *_without_key("scores", ("span_key", "seq", "trace_id", "span_id", "time_ns")),
    "CREATE TABLE lousho_compaction (checked_ns BIGINT NOT NULL)",
    "INSERT INTO lousho_compaction SELECT coalesce(max(received_ns), 0) FROM spans",
)

# Migration 5: a span's resource is kept once per distinct resource, not copied into every span's row (one
# resource of 1 MiB on 2,100 spans took 2 GiB). The spans' table is ``span_rows``, holding the resource's key;
# ``resources`` holds each key's JSON; ``spans`` is a view with the columns it had, in the same order, so every
# query, view and reader keeps working. The view joins a grouped ``resources``: unique by construction, which
# lets DuckDB drop the join from a query that reads no ``resource`` (measured: a scan costs what the table's
# does). Writes (inserts, compaction's deletes by rowid) go to ``span_rows``. The key is
# ``otlp_decode.resource_key`` in SQL: the first 63 bits of the SHA-256 of the JSON text.
_SPAN_COLUMNS_5 = (
    "span_key", "trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns", "duration_ns",
    "status_code", "status_message", "service_name", "scope_name", "operation", "agent_name", "provider",
    "request_model", "response_model", "tool_name", "conversation_id", "input_tokens", "output_tokens", "cost_usd",
    "error_type", "run_id", "run_kind", "healed_from", "harness_revision", "case_id", "probe", "traffic_arm",
    "input", "output", "attributes", "resource", "events", "links", "received_ns", "call_id", "cache_read_tokens",
    "cache_creation_tokens", "reasoning_tokens", "cost_source", "skill_name", "input_text", "output_text", "commit_seq",
)
_RESOURCE_KEY_SQL = "((('0x' || sha256(resource::VARCHAR)[1:16])::UBIGINT) >> 1)::BIGINT"
_RESOURCES_ONCE = (
    "CREATE TABLE resources (resource_key BIGINT NOT NULL, resource JSON NOT NULL)",
    f"INSERT INTO resources SELECT DISTINCT {_RESOURCE_KEY_SQL}, resource FROM spans WHERE resource IS NOT NULL",
    "CREATE TABLE span_rows AS SELECT * EXCLUDE (resource), NULL::BIGINT AS resource_key FROM spans LIMIT 0",
    *(f"ALTER TABLE span_rows ALTER COLUMN {column} SET NOT NULL"
      for column in ("span_key", "trace_id", "span_id", "name", "kind", "start_ns", "end_ns", "duration_ns",
                     "status_code", "received_ns")),
    f"INSERT INTO span_rows SELECT * EXCLUDE (resource), {_RESOURCE_KEY_SQL} FROM spans",
    "DROP TABLE spans",
    "CREATE VIEW spans AS SELECT "
    + ", ".join("r.resource" if c == "resource" else f"s.{c}" for c in _SPAN_COLUMNS_5)
    + " FROM span_rows s LEFT JOIN (SELECT resource_key, any_value(resource) AS resource FROM resources "
      "GROUP BY resource_key) r ON r.resource_key = s.resource_key",
)

# Migration 6: a span's fingerprint of what its agent sent and the source of its revision (conventions.py), the
# ``spans`` view with them, and the kept runs made again: a run's revision may be derived, its status is its
# root's (handled errors counted apart).
_SPAN_COLUMNS_6 = (*_SPAN_COLUMNS_5, "fingerprint", "revision_source")
_REVISION_SOURCES = (
    "ALTER TABLE span_rows ADD COLUMN fingerprint VARCHAR",
    "ALTER TABLE span_rows ADD COLUMN revision_source VARCHAR",
    "CREATE OR REPLACE VIEW spans AS SELECT "
    + ", ".join("r.resource" if c == "resource" else f"s.{c}" for c in _SPAN_COLUMNS_6)
    + " FROM span_rows s LEFT JOIN (SELECT resource_key, any_value(resource) AS resource FROM resources "
      "GROUP BY resource_key) r ON r.resource_key = s.resource_key",
    *runs_table.REBUILD,
)

_SPOOL_POSITION = (
    "CREATE TABLE IF NOT EXISTS lousho_spool (loaded_seq BIGINT NOT NULL)",
    "INSERT INTO lousho_spool SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM lousho_spool)",
)

MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("spans, scores and the runs view", (_SPANS, _SCORES)),
    ("runs from any GenAI trace: run roots, tokens, cost, input and output text; the sessions view",
     _GENAI_COLUMNS),
    ("runs and sessions kept as tables folded from the spans by commit, the views merging the unfolded ones in",
     runs_table.MIGRATION),
    ("no primary keys on spans and scores: the writer's recent-key filter and compaction de-duplicate",
     _LEAN_TABLES),
    ("each resource kept once: spans is a view of span_rows joined with resources",
     _RESOURCES_ONCE),
    ("a revision for every run (derived from what the agent sent), handled errors apart from failed runs; runs "
     "read every convention: the user's question and the final answer, the declared agent, one count per model "
     "request, an error type for every failed run", _REVISION_SOURCES),
    # What the frameworks' real packages send (tests/frameworks/): the kept parts and runs made again.
    ("runs as the frameworks' real traces need them: a revision from the first model call, no count for "
     "LlamaIndex's request-building span, the openai class of an HTTP error, no error type on an ok run",
     runs_table.REBUILD),
    ("the spool's position: the last accepted request loaded, committed with its spans (a restart replays the "
     "rest exactly once)", _SPOOL_POSITION),
    ("the lake name the store ships under (lake/lake_shipper.py): a new hostname must not ship it all again",
     ("CREATE TABLE IF NOT EXISTS lousho_lake_identity (lake_name VARCHAR NOT NULL)",)),
    # Stores that ran migrations 3, 6 or 7 before this one have them; on a new store those no longer make them.
    ("no index on the kept runs and sessions: their upkeep was a tenth of what a fold costs",
     ("DROP INDEX IF EXISTS kept_runs_run_id", "DROP INDEX IF EXISTS kept_sessions_session_id")),
    # The new views come with it (``migrate``); the kept rows are otherwise what they were: nothing to fold again.
    ("the kept sessions without their run ids, which the view joins on from the runs: each fold rewrote every "
     "touched session's whole list, a cost growing with the store",
     ("DROP VIEW IF EXISTS sessions", "ALTER TABLE kept_sessions DROP COLUMN IF EXISTS run_ids")),
)

SCHEMA_VERSION = len(MIGRATIONS)

# The statements making the ``runs`` and ``sessions`` views over the kept tables at watermark -1, which every
# migration running ``runs_table.REBUILD`` ends with: ``migrate`` makes them itself, once.
_KEPT_VIEWS = frozenset(runs_table.views(-1))
_HAS_KEPT_VIEWS = ("SELECT count(*) FROM duckdb_views() WHERE database_name = current_database() "
                   "AND schema_name = 'main' AND view_name IN ('runs', 'sessions')")

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


def refuse_another_programs_tables(con: duckdb.DuckDBPyConnection) -> None:
    """A file never migrated that already holds tables is another program's database, not a new store."""
    tables = [name for (name,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
        "ORDER BY table_name LIMIT 6").fetchall()]
    if tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreNotLousho(f"the DuckDB file holds another program's tables ({shown}) and no lousho store")


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Apply every migration the store lacks, each in its own transaction; return the version."""
    version = current_version(con)
    if version == 0:
        refuse_another_programs_tables(con)
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
            if statement not in _KEPT_VIEWS:
                con.execute(statement)
        con.execute(
            "INSERT INTO lousho_schema (version, description) VALUES (?, ?)", [number, description]
        )
        con.execute("COMMIT")
    if version < SCHEMA_VERSION or con.execute(_HAS_KEPT_VIEWS).fetchall()[0][0] < 2:
        _make_kept_views(con)
    return SCHEMA_VERSION


def _make_kept_views(con: duckdb.DuckDBPyConnection) -> None:
    """The ``runs`` and ``sessions`` views as this code makes them, at the store's fold watermark."""
    con.execute("BEGIN")
    watermark = con.execute("SELECT watermark FROM runs_fold").fetchall()[0][0]
    for statement in runs_table.views(watermark):
        con.execute(statement)
    con.execute("COMMIT")


def check_readable(con: duckdb.DuckDBPyConnection) -> int:
    """For read-only opens: the version, refusing a store newer than this code or another program's file."""
    version = current_version(con)
    if version == 0:
        refuse_another_programs_tables(con)
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"store schema version {version} is newer than this lousho's {SCHEMA_VERSION}"
        )
    return version
