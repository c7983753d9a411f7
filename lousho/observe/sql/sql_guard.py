"""What a read may call: the statement check every SQL API query passes before it runs.

The check reads DuckDB's own parse tree (``json_serialize_sql``), not the query text, so quoting,
comments, nesting and case cannot hide a call. DuckDB parses and scans it in one statement with the GIL
released, on the caller's connection and inside its time limit: a statement of a million tokens keeps a
SQL worker busy, never the event loop or the threads that decode and store spans.
It refuses, with ``LOUSHO_SQL_REFUSED`` naming what it found:

- anything but exactly one SELECT statement (INSERT, COPY, ATTACH, SET, PRAGMA, CALL, ...);
- a data-modifying query anywhere inside it (``WITH x AS (DELETE ... RETURNING ...) SELECT ...``);
- a table function outside ``READ_TABLE_FUNCTIONS`` (``enable_logging``, ``checkpoint``,
  ``truncate_duckdb_logs``, ``query``, the file readers, ...);
- a scalar function DuckDB itself marks as having side effects or being volatile, unless it is in
  ``HARMLESS_VOLATILE`` (``setseed``, ``nextval``, ``setval``, ``write_log``, ``sleep_ms``);
- a function in ``UNSAFE_FUNCTIONS``, which no setting fences: ``json_contains`` (deep JSON overflows the
  stack, and the query runs in the daemon's process) and ``json_serialize_plan`` (it plans SQL given as text).

It is one of two fences: the query then runs in a read-only transaction on a database whose
configuration is locked (``sql.run_query``, ``store.SpanStore``), so a function this list misses
still cannot write or reconfigure.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb

from lousho.observe.errors import SqlFailed, SqlRefused

# Table functions that only read: generators, catalog listings and JSON walkers. An allow-list, so a
# table function a new DuckDB adds is refused until someone reads what it does.
READ_TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree",
    "test_all_types", "histogram", "histogram_values", "summary",
    "duckdb_columns", "duckdb_constraints", "duckdb_databases", "duckdb_dependencies", "duckdb_functions",
    "duckdb_indexes", "duckdb_keywords", "duckdb_optimizers", "duckdb_schemas", "duckdb_sequences",
    "duckdb_settings", "duckdb_tables", "duckdb_types", "duckdb_views", "duckdb_extensions",
    "duckdb_memory", "duckdb_temporary_files", "duckdb_variables",
    "pragma_table_info", "pragma_version", "pragma_database_size", "pragma_storage_info",
    "pragma_metadata_info", "pragma_show", "pragma_platform", "pragma_collations", "pragma_user_agent",
    "icu_calendar_names", "pg_timezone_names",
})

# Volatile scalars that change nothing outside the value they return.
HARMLESS_VOLATILE = frozenset({
    "random", "uuid", "uuidv4", "uuidv7", "gen_random_uuid", "error", "stats", "vector_type",
    "current_query", "current_query_id", "current_connection_id", "current_transaction_id", "currval",
})

# Functions refused wherever they appear, each with why: neither the read-only transaction nor the locked
# configuration stops them. Found by calling each JSON function on 300,000 nested brackets (json_structure,
# json_extract, json_transform, json_merge_patch, json_pretty, ... answer or fail with an error).
UNSAFE_FUNCTIONS = {
    "json_contains": "it recurses once per nesting level of its JSON, so deeply nested JSON overflows the stack "
                     "and takes the daemon's process with it",
    "json_serialize_plan": "it binds and plans SQL given to it as text, which the check cannot read",
}
_UNSAFE_HINT = "compare JSON with json_extract, ->> or unnest instead; send SQL as the query itself"

# Parse-tree query nodes a read may contain; DELETE/INSERT/UPDATE_QUERY_NODE (a data-modifying CTE
# or subquery) and anything newer are refused.
_READ_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})

_parser_lock = threading.Lock()

# Statements whose text is at most this long are named when refused ("INSERT statements are refused");
# naming them takes DuckDB's statement splitter, which holds the GIL (about 1 ms per kilobyte).
_NAMED_UP_TO = 8 * 1024

# The check, as one DuckDB statement: DuckDB parses the text into its JSON parse tree and scans that
# tree, all with the GIL released, so a huge statement costs ingest nothing, and ``con.interrupt`` (the
# time limit) can stop it between steps. Only short lists come back to Python.
#
# The tree is scanned as text, which is exact for what is looked for: the serialiser writes compact
# JSON with fixed key names, and inside a JSON string every quote is escaped, so ``"type":"X_NODE"``
# and ``"function_name":"..."`` cannot occur inside a string value. A user-chosen name could at most
# add a match (a refusal, never a pass); every real node and call matches.
_CHECK = r"""
WITH s AS MATERIALIZED (SELECT json_serialize_sql(?::VARCHAR, skip_null := true, skip_empty := true) AS j)
SELECT
    starts_with(j, '{"error":true'),
    CASE WHEN starts_with(j, '{"error":true') THEN json_extract_string(j, '$.error_type') END,
    CASE WHEN starts_with(j, '{"error":true') THEN json_extract_string(j, '$.error_message') END,
    CASE WHEN starts_with(j, '{"error":false') THEN json_array_length(j, '$.statements') END,
    list_distinct(regexp_extract_all(j, '"type":"([A-Z_]+_NODE)"', 1)),
    list_distinct(regexp_extract_all(j, '"function_name":"((?:[^"\\]|\\.)*)"', 1)),
    list_distinct(regexp_extract_all(j, '"(?:catalog_name|schema_name|catalog|schema)":"((?:[^"\\]|\\.)*)"', 1)),
    len(regexp_extract_all(j, '"type":"SELECT_NODE"')),
    len(regexp_extract_all(j, '"type":"JOIN"')) + len(regexp_extract_all(j, '"class":"SUBQUERY"')),
    len(regexp_extract_all(j, '"table_name":"(?i:runs|sessions)"')),
    contains(j, '"materialized":"CTE_MATERIALIZE_NEVER"')
FROM s
"""

# Bounds on what DuckDB must plan. The time limit interrupts execution, not planning, and planning grows faster
# than the text: 20,000 UNION ALLs (220 KB) planned for 78 s against an 8 s limit, 200 tables in one join for
# 14 s (400: 215 s), and ``runs`` is a view of many steps (50 references: 10 s). A subquery in an expression
# (IN, EXISTS, a scalar) is planned as a join, and counts as one. At each bound alone the dearest plan found
# takes 0.5-1.1 s (500 SELECTs of spans 0.6 s, 64 joins of spans 0.45 s, 10 of runs 1.1 s); together, more.
# A NOT MATERIALIZED CTE is copied in at every use, so CTEs that each use the one before twice double the plan
# with every line: refused outright (DuckDB's own choice materialises a CTE used more than once).
MAX_SELECTS = 500
MAX_JOINS = 64
MAX_RUNS_VIEWS = 10
_PLAN_HINT = "split the query into several, or aggregate in one pass (GROUP BY) rather than one branch per value"


@dataclass(frozen=True)
class Checked:
    """What the check read in an accepted query: the functions it calls and the catalogs and schemas it names
    (each lower-cased), for a second fence that knows another DuckDB's functions (``check_lake_read_only``)."""

    functions: frozenset[str]
    qualifiers: frozenset[str]


def check_read_only(query: object, con: duckdb.DuckDBPyConnection | None = None) -> Checked:
    """Refuse anything that is not one side-effect-free SELECT, before it reaches the store.

    The parse and the scan run as one statement on ``con`` (a cursor of the store; by default an empty
    database that only parses), so the caller's time limit interrupts them like the query itself.
    """
    if not isinstance(query, str) or not query.strip():
        raise SqlRefused("the query is empty")
    own = con is None
    if own:
        with _parser_lock:
            con = _parser().cursor()
    assert con is not None
    try:
        row = con.execute(_CHECK, [query]).fetchone()
    finally:
        if own:
            con.close()
    assert row is not None
    failed, error_type, error_message, count, node_types, names, qualifiers, selects, joins, views, inlined = row
    if failed:
        _refuse_unserialisable(query, error_type, error_message)
    if count == 0:
        raise SqlRefused("the query is empty")
    if count != 1:
        raise SqlRefused(f"one statement per request, got {count}")
    if inlined:
        raise SqlRefused("NOT MATERIALIZED common table expressions are refused: DuckDB copies one in at every use, "
                         "so a few lines of them can take hours to plan", hint="leave out NOT MATERIALIZED")
    for found, bound, what in ((selects, MAX_SELECTS, "SELECTs (each branch of a UNION is one)"),
                               (joins, MAX_JOINS, "joins and subqueries (IN, EXISTS, scalar)"),
                               (views, MAX_RUNS_VIEWS, "references to runs or sessions")):
        if found > bound:
            raise SqlRefused(f"the query has {found:,} {what}; at most {bound:,} are planned, since planning "
                             "runs outside the time limit", hint=_PLAN_HINT)
    for node_type in node_types:
        if node_type not in _READ_NODES:
            verb = node_type.removesuffix("_QUERY_NODE").removesuffix("_NODE")
            raise SqlRefused(f"{verb} inside a query is refused: the SQL API is read-only")
    denied = side_effect_functions()
    tables = non_reading_table_functions()
    functions = frozenset(json.loads(f'"{escaped}"').lower() for escaped in names)
    for name in sorted(functions):
        if name in UNSAFE_FUNCTIONS:
            raise SqlRefused(f"the function {name}() is refused: {UNSAFE_FUNCTIONS[name]}", hint=_UNSAFE_HINT)
        if name in tables:
            raise SqlRefused(f"the table function {name}() is refused: the SQL API only reads "
                             "the store (ranges, unnest, catalog listings)")
        if name in denied:
            raise SqlRefused(f"the function {name}() is refused: it changes state, and the SQL API is read-only")
    return Checked(functions, frozenset(json.loads(f'"{escaped}"').lower() for escaped in qualifiers or ()))


def _refuse_unserialisable(query: str, error_type: str | None, error_message: str | None) -> None:
    message = (error_message or "").strip().splitlines()[0] if (error_message or "").strip() else "unknown error"
    if error_type == "parser":
        raise SqlFailed(f"the query does not parse: {message[:500]}")
    if "Only SELECT statements" not in message:
        # A SELECT DuckDB cannot serialise: refuse what we cannot read rather than run it unchecked.
        raise SqlRefused(f"the query cannot be checked: {message[:500]}")
    if len(query) <= _NAMED_UP_TO:
        statements = duckdb.extract_statements(query)
        if len(statements) != 1:
            raise SqlRefused(f"one statement per request, got {len(statements)}")
        kind = statements[0].type
        name = getattr(kind, "name", str(kind))
        raise SqlRefused(f"{name} statements are refused: the SQL API is read-only")
    raise SqlRefused("only one SELECT statement is accepted: the SQL API is read-only")


@functools.cache
def _parser() -> duckdb.DuckDBPyConnection:
    """An empty in-memory database that only parses: the check never touches the store."""
    return duckdb.connect(":memory:", config={"enable_external_access": False,
                                              "autoinstall_known_extensions": False,
                                              "autoload_known_extensions": False})


@functools.cache
def non_reading_table_functions() -> frozenset[str]:
    """Every table function and table macro of this DuckDB outside ``READ_TABLE_FUNCTIONS``.

    A call is refused by name wherever it appears: no scalar shares a name with one of these today, and
    if one ever does it is refused too (the safe side).
    """
    with _parser_lock:
        cursor = _parser().cursor()
    try:
        rows = cursor.execute(
            "SELECT DISTINCT lower(function_name) FROM duckdb_functions() "
            "WHERE function_type IN ('table', 'table_macro')"
        ).fetchall()
    finally:
        cursor.close()
    return frozenset(name for (name,) in rows) - READ_TABLE_FUNCTIONS


@functools.cache
def side_effect_functions() -> frozenset[str]:
    """Every scalar this DuckDB marks as having side effects or being volatile, less the harmless ones.

    Derived from ``duckdb_functions()`` rather than typed, so an upgrade that adds such a function
    refuses it until it is reviewed into ``HARMLESS_VOLATILE``.
    """
    with _parser_lock:
        cursor = _parser().cursor()
    try:
        rows = cursor.execute(
            "SELECT DISTINCT lower(function_name) FROM duckdb_functions() "
            "WHERE function_type NOT IN ('table', 'table_macro', 'pragma') "
            "AND (has_side_effects OR stability = 'VOLATILE')"
        ).fetchall()
    finally:
        cursor.close()
    return frozenset(name for (name,) in rows) - HARMLESS_VOLATILE


# Functions the lake's DuckDB (1.5 with the postgres and ducklake extensions) has and lousho's does not, which a lake
# query may still call. Empty: each of them (postgres_scan, postgres_query, ducklake_*, ...) reaches the catalog's
# Postgres or the lake's files past the lake's read-only attach; one is added only after reading what it does.
LAKE_EXTRA_FUNCTIONS: frozenset[str] = frozenset()

# The databases a lake query may name: the lake, and DuckDB's own (empty or built in). Not the lake's metadata
# catalog (``__ducklake_metadata_<name>``, the Postgres catalog itself) nor anything else attached.
# Reading functions that read a table named by a string (which the parse cannot see as a table): in the lake's
# DuckDB that string may name the metadata catalog (``histogram_values('__ducklake_metadata_lake.pg_catalog.pg_authid',
# rolpassword)``). Refused by name on the lake, the ``histogram`` aggregate included (``histogram_exact`` remains).
LAKE_REFUSED_FUNCTIONS = frozenset({"histogram", "histogram_values", "pragma_storage_info", "pragma_metadata_info"})
LAKE_DATABASES = frozenset({"lake", "memory", "system", "temp"})
LAKE_METADATA_PREFIX = "__ducklake_metadata_"


@dataclass(frozen=True)
class LakeFunction:
    """One function name of the lake's DuckDB, as its ``duckdb_functions()`` lists it (over all overloads)."""

    name: str
    table: bool
    side_effects: bool


def check_lake_read_only(query: object, lake_functions: Iterable[LakeFunction], lake_databases: Iterable[str]) -> None:
    """The statement check for a query of the lake, which runs on another DuckDB than the one that parses here.

    On top of ``check_read_only``: refuse every function of the lake's DuckDB that lousho's does not have
    (unless in ``LAKE_EXTRA_FUNCTIONS``), every table function of it outside ``READ_TABLE_FUNCTIONS`` and every
    scalar it marks volatile or side-effecting outside ``HARMLESS_VOLATILE``; and any catalog or schema that names
    the lake's metadata catalog or a database attached there other than the lake.
    """
    checked = check_read_only(query)
    known = local_functions()
    by_name = {f.name.lower(): f for f in lake_functions}
    for name in sorted(checked.functions):
        if name in LAKE_REFUSED_FUNCTIONS:
            raise SqlRefused(f"the function {name}() is refused on the lake: it reads a table named by a string, "
                             "which the check cannot see", hint="query the table itself (FROM spans ...)")
        found = by_name.get(name)
        if found is None:
            continue  # not a function there: the lake's DuckDB fails the query itself
        if name not in known and name not in LAKE_EXTRA_FUNCTIONS:
            raise SqlRefused(f"the function {name}() is refused on the lake: it is one of the lake's extensions "
                             "(the catalog's Postgres, DuckLake's own calls), not a read of the lake's tables",
                             hint="query the lake's tables (spans, runs, sessions, ...) with plain SQL")
        if found.table and name not in READ_TABLE_FUNCTIONS:
            raise SqlRefused(f"the table function {name}() is refused: the SQL API only reads "
                             "the lake (ranges, unnest, catalog listings)")
        if not found.table and found.side_effects and name not in HARMLESS_VOLATILE:
            raise SqlRefused(f"the function {name}() is refused: it changes state, and the SQL API is read-only")
    others = {d.lower() for d in lake_databases} - LAKE_DATABASES
    for qualifier in sorted(checked.qualifiers):
        if qualifier.startswith(LAKE_METADATA_PREFIX) or qualifier in others:
            raise SqlRefused(f"{qualifier!r} is refused: a lake query reads the lake's own tables, not its "
                             "catalog's database or another attached one",
                             hint="name the lake's tables without a catalog (spans, runs, ...) or as lake.<table>")


@functools.cache
def local_functions() -> frozenset[str]:
    """Every function name lousho's own DuckDB knows (any kind)."""
    with _parser_lock:
        cursor = _parser().cursor()
    try:
        rows = cursor.execute("SELECT DISTINCT lower(function_name) FROM duckdb_functions()").fetchall()
    finally:
        cursor.close()
    return frozenset(name for (name,) in rows)


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
