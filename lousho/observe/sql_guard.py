"""What a read may call: the statement check every SQL API query passes before it runs.

The check reads DuckDB's own parse tree (``json_serialize_sql``), not the query text, so quoting,
comments, nesting and case cannot hide a call. It refuses, with ``LOUSHO_SQL_REFUSED`` naming what
it found:

- anything but exactly one SELECT statement (INSERT, COPY, ATTACH, SET, PRAGMA, CALL, ...);
- a data-modifying query anywhere inside it (``WITH x AS (DELETE ... RETURNING ...) SELECT ...``);
- a table function outside ``READ_TABLE_FUNCTIONS`` (``enable_logging``, ``checkpoint``,
  ``truncate_duckdb_logs``, ``query``, the file readers, ...);
- a scalar function DuckDB itself marks as having side effects or being volatile, unless it is in
  ``HARMLESS_VOLATILE`` (``setseed``, ``nextval``, ``setval``, ``write_log``, ``sleep_ms``).

It is one of two fences: the query then runs in a read-only transaction on a database whose
configuration is locked (``sql.run_query``, ``store.SpanStore``), so a function this list misses
still cannot write or reconfigure.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from typing import Any

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

# Parse-tree query nodes a read may contain; DELETE/INSERT/UPDATE_QUERY_NODE (a data-modifying CTE
# or subquery) and anything newer are refused.
_READ_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})

_ALLOWED_STATEMENTS = {duckdb.StatementType.SELECT}

_parser_lock = threading.Lock()


def check_read_only(query: object) -> None:
    """Refuse anything that is not one side-effect-free SELECT, before it reaches the store."""
    if not isinstance(query, str) or not query.strip():
        raise SqlRefused("the query is empty")
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise SqlFailed(f"the query does not parse: {first_line(e)}") from None
    if len(statements) != 1:
        raise SqlRefused(f"one statement per request, got {len(statements)}")
    kind = statements[0].type
    if kind not in _ALLOWED_STATEMENTS:
        name = getattr(kind, "name", str(kind))
        raise SqlRefused(f"{name} statements are refused: the SQL API is read-only")
    _check_tree(_parse_tree(query))


def _check_tree(tree: Any) -> None:
    denied = side_effect_functions()
    for node in _nodes(tree):
        node_type = node.get("type")
        if isinstance(node_type, str) and node_type.endswith("_NODE") and node_type not in _READ_NODES:
            verb = node_type.removesuffix("_QUERY_NODE").removesuffix("_NODE")
            raise SqlRefused(f"{verb} inside a query is refused: the SQL API is read-only")
        if node_type == "TABLE_FUNCTION":
            name = _function_name(node.get("function"))
            if name is not None and name not in READ_TABLE_FUNCTIONS:
                raise SqlRefused(f"the table function {name}() is refused: the SQL API only reads "
                                 "the store (ranges, unnest, catalog listings)")
        name = _function_name(node)
        if name is not None and name in denied:
            raise SqlRefused(f"the function {name}() is refused: it changes state, and the SQL API is read-only")


def _parse_tree(query: str) -> Any:
    with _parser_lock:
        cursor = _parser().cursor()
    try:
        row = cursor.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
    finally:
        cursor.close()
    tree = json.loads(row[0]) if row else {"error": True}
    if tree.get("error"):
        # extract_statements said SELECT, so this is syntax DuckDB cannot serialise: refuse what we
        # cannot read rather than run it unchecked.
        raise SqlRefused(f"the query cannot be checked: {tree.get('error_message') or 'not serialisable'}")
    return tree


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _function_name(node: Any) -> str | None:
    if not isinstance(node, dict) or not isinstance(node.get("function_name"), str):
        return None
    return node["function_name"].lower()


@functools.cache
def _parser() -> duckdb.DuckDBPyConnection:
    """An empty in-memory database that only parses: the check never touches the store."""
    return duckdb.connect(":memory:", config={"enable_external_access": False,
                                              "autoinstall_known_extensions": False,
                                              "autoload_known_extensions": False})


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


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
