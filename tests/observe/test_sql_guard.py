"""The SQL API cannot write, reconfigure or be driven by a web page, through the daemon and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from daemon_support import get, post, sql
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.errors import SqlFailed, SqlRefused
from lousho.observe.sql import query as sql_api
from lousho.observe.sql import sql_guard
from lousho.observe.sql.sql_guard import LakeFunction, check_lake_read_only, check_read_only
from lousho.observe.store import schema
from lousho.observe.store.span_store import SpanStore

WRITING_CTES = [
    "WITH x AS (DELETE FROM spans RETURNING 1) SELECT count(*) FROM x",
    "WITH x AS (UPDATE scores SET score_value = 1.0, passed = true RETURNING 1) SELECT count(*) FROM x",
    "WITH x AS (INSERT INTO scores SELECT * FROM scores RETURNING 1) SELECT count(*) FROM x",
    "WITH x AS (UPDATE lousho_schema SET version = 999 RETURNING version) SELECT * FROM x",
    "SELECT (WITH x AS (DELETE FROM lousho_schema RETURNING 1) SELECT count(*) FROM x) AS n",
]

SIDE_EFFECTS = [
    ("SELECT * FROM enable_logging(storage := 'file', storage_path := '{dir}')", "enable_logging"),
    ("SELECT * FROM enable_logging()", "enable_logging"),
    ("SELECT * FROM disable_logging()", "disable_logging"),
    ("SELECT * FROM truncate_duckdb_logs()", "truncate_duckdb_logs"),
    ("SELECT * FROM checkpoint()", "checkpoint"),
    ("SELECT * FROM force_checkpoint()", "force_checkpoint"),
    ("SELECT * FROM enable_profiling()", "enable_profiling"),
    ("SELECT * FROM main.Enable_Logging()", "enable_logging"),
    ("SELECT 1 FROM range(1) WHERE EXISTS (SELECT * FROM checkpoint())", "checkpoint"),
    ("SELECT setseed(0.5)", "setseed"),
    ("SELECT nextval('s')", "nextval"),
    ("SELECT write_log('x')", "write_log"),
    ("SELECT list_transform([1], x -> sleep_ms(60000))", "sleep_ms"),
]


def _state(url: str) -> tuple[list[dict], list[dict], list[dict]]:
    return (sql(url, "SELECT count(*) AS n FROM spans"),
            sql(url, "SELECT count(*) AS n, sum(score_value) AS v FROM scores"),
            sql(url, "SELECT max(version) AS v FROM lousho_schema"))


def _seed(url: str) -> None:
    trace_id, span_id = new_ids()
    body = request([chat_span(trace_id, span_id)]).SerializeToString()
    assert post(url, "/v1/traces", body, "application/x-protobuf").status == 200


def _lousho_sql(url: str, query: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", "sql", "--url", url, query],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.system
@pytest.mark.parametrize("query", WRITING_CTES)
def test_data_modifying_cte_is_refused_and_changes_nothing(shared_daemon, query):
    _seed(shared_daemon.url)
    before = _state(shared_daemon.url)
    reply = post(shared_daemon.url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json")
    assert reply.status == 400
    assert reply.json()["error"]["code"] == "LOUSHO_SQL_REFUSED"
    cli = _lousho_sql(shared_daemon.url, query)
    assert cli.returncode == 1 and "LOUSHO_SQL_REFUSED" in cli.stderr and "Traceback" not in cli.stderr
    assert _state(shared_daemon.url) == before


@pytest.mark.system
@pytest.mark.parametrize(("query", "function"), SIDE_EFFECTS)
def test_side_effecting_function_is_refused_by_name_and_the_daemon_keeps_serving(
        shared_daemon, tmp_path, query, function):
    _seed(shared_daemon.url)
    before = _state(shared_daemon.url)
    query = query.format(dir=tmp_path / "logs")
    reply = post(shared_daemon.url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json")
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["code"] == "LOUSHO_SQL_REFUSED" and f"{function}()" in error["message"]
    assert not (tmp_path / "logs").exists()
    # The next query and the next export are served (file logging used to abort the process here).
    _seed(shared_daemon.url)
    assert _state(shared_daemon.url)[0] == [{"n": before[0][0]["n"] + 1}]
    assert sql(shared_daemon.url, "SELECT current_setting('enable_logging') AS v") == [{"v": False}]
    assert get(shared_daemon.url, "/healthz").status == 200


@pytest.mark.system
def test_reading_table_functions_still_work(shared_daemon):
    assert sql(shared_daemon.url, "SELECT count(*) AS n FROM range(5)") == [{"n": 5}]
    assert sql(shared_daemon.url, "SELECT count(*) > 0 AS ok FROM duckdb_columns() WHERE table_name = 'spans'") \
        == [{"ok": True}]
    assert sql(shared_daemon.url, "SELECT name FROM pragma_table_info('lousho_schema') ORDER BY cid LIMIT 1") \
        == [{"name": "version"}]


@pytest.mark.system
@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "",
    "application/jsonp",
])
def test_sql_api_takes_only_json_bodies(shared_daemon, content_type):
    body = json.dumps({"query": "SELECT 1 AS one"}).encode()
    reply = post(shared_daemon.url, "/v1/sql", body, content_type)
    assert reply.status == 415
    assert reply.json()["error"]["code"] == "LOUSHO_SQL_UNSUPPORTED_MEDIA_TYPE"
    assert post(shared_daemon.url, "/v1/sql", body, "application/json; charset=utf-8").json()["rows"] \
        == [{"one": 1}]


def _unions(n: int, table: str = "spans") -> str:
    return " UNION ALL ".join([f"SELECT count(*) FROM {table}"] * n)


def _joins(n: int) -> str:
    return "SELECT count(*) FROM spans s0 " + " ".join(f"JOIN spans s{i} USING (span_id)" for i in range(1, n + 1))


def _subqueries(n: int) -> str:
    return "SELECT count(*) FROM range(10) WHERE " + " AND ".join(f"range IN (SELECT range FROM range({k + 2}))"
                                                                 for k in range(n))


def _doubling(levels: int, materialized: str = "") -> str:
    ctes = ["c0 AS (SELECT 1 AS x)"] + [f"c{k} AS {materialized}(SELECT x FROM c{k - 1} UNION ALL SELECT x FROM "
                                        f"c{k - 1})" for k in range(1, levels + 1)]
    return f"WITH {', '.join(ctes)} SELECT count(*) FROM c{levels}"


def test_ctes_copied_in_at_every_use_are_refused_and_ctes_duckdb_materialises_pass():
    """20 NOT MATERIALIZED CTEs, each using the one before twice, are under 1 KB and 60 SELECTs, and their plan
    doubles with every line (13 lines: 2 s); without NOT MATERIALIZED DuckDB materialises them and plans at once."""
    check_read_only(_doubling(20))
    check_read_only(_doubling(20, "MATERIALIZED "))
    with pytest.raises(SqlRefused, match="NOT MATERIALIZED") as refused:
        check_read_only(_doubling(20, "NOT MATERIALIZED "))
    assert refused.value.hint


@pytest.mark.parametrize(("query", "within"), [
    (_subqueries(sql_guard.MAX_JOINS), _subqueries(sql_guard.MAX_JOINS + 1)),
    (_unions(sql_guard.MAX_SELECTS), _unions(sql_guard.MAX_SELECTS + 1)),
    (_joins(sql_guard.MAX_JOINS), _joins(sql_guard.MAX_JOINS + 1)),
    (_unions(sql_guard.MAX_RUNS_VIEWS, "runs"), _unions(sql_guard.MAX_RUNS_VIEWS + 1, '"Runs"')),
    (_unions(sql_guard.MAX_RUNS_VIEWS, "main.sessions"), _unions(sql_guard.MAX_RUNS_VIEWS + 1, "SESSIONS")),
], ids=["subqueries", "unions", "joins", "runs", "sessions"])
def test_statements_too_costly_to_plan_are_refused_before_planning(query, within):
    """The time limit interrupts execution, not planning: 20,000 UNION ALLs planned for 78 s against an 8 s
    limit. The check counts what makes planning dear and refuses past the bound, naming it."""
    check_read_only(query)
    with pytest.raises(SqlRefused, match="are planned") as refused:
        check_read_only(within)
    assert refused.value.hint


@pytest.mark.system
def test_a_statement_that_would_plan_for_a_minute_is_refused_and_the_daemon_serves_on(shared_daemon):
    query = " UNION ALL ".join(["SELECT 1"] * 20_000)
    reply = post(shared_daemon.url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json")
    assert reply.status == 400 and reply.json()["error"]["code"] == "LOUSHO_SQL_REFUSED", reply.body
    assert sql(shared_daemon.url, "SELECT 1 AS one") == [{"one": 1}]


def test_sql_reads_no_file_in_the_working_directorys_temporary_folder(tmp_path, monkeypatch):
    """DuckDB lets SQL read its temporary directory with external access off. The writer's in-memory instance
    had ``.tmp`` in the daemon's working directory for one, so a user's file there was readable; the store now
    spills beside itself, and only there."""
    work = tmp_path / "project"
    (work / ".tmp").mkdir(parents=True)
    (work / ".tmp" / "secret.csv").write_text("a,b\n1,secret\n")
    monkeypatch.chdir(work)
    store = SpanStore(tmp_path / "o.duckdb")
    try:
        con = store.reader()
        for query in ("SELECT * FROM '.tmp/secret.csv'", f"SELECT * FROM '{work / '.tmp' / 'secret.csv'}'",
                      f"SELECT * FROM glob('{work / '.tmp'}/*')"):
            with pytest.raises((SqlRefused, SqlFailed)):
                sql_api.run_query(con, query)
        assert con.execute("SELECT current_setting('temp_directory')").fetchall() == [(str(tmp_path / "o.duckdb.tmp"),)]
        con.close()
    finally:
        store.close()


def test_engine_fences_hold_when_the_parse_check_is_bypassed(tmp_path, monkeypatch):
    """Defence in depth: with the parse-tree check switched off, the read-only transaction still
    refuses the write and the locked configuration still refuses enable_logging."""
    store = SpanStore(tmp_path / "o.duckdb")
    try:
        monkeypatch.setattr(sql_api, "check_read_only", lambda query, con=None: None)
        con = store.reader()
        with pytest.raises(SqlRefused, match="read-only"):
            sql_api.run_query(con, "WITH x AS (DELETE FROM lousho_schema RETURNING 1) SELECT * FROM x")
        with pytest.raises(SqlRefused, match="locked"):
            sql_api.run_query(con, f"SELECT * FROM enable_logging(storage := 'file', "
                                   f"storage_path := '{tmp_path / 'logs'}')")
        with pytest.raises((SqlRefused, SqlFailed)):
            sql_api.run_query(con, "SELECT setval('none', 1)")
        assert sql_api.run_query(con, "SELECT max(version) AS v FROM lousho_schema").table.to_pylist() \
            == [{"v": schema.SCHEMA_VERSION}]
        con.close()
        # The writer's own work is untouched by the lock.
        store.checkpoint()
        assert store.reader().execute("SELECT current_setting('lock_configuration')").fetchall() == [(True,)]
    finally:
        store.close()
    assert not (tmp_path / "logs").exists()


def test_the_file_client_goes_through_the_same_check(tmp_path):
    from lousho.observe.client.store_client import FileClient

    path = tmp_path / "o.duckdb"
    SpanStore(path).close()
    client = FileClient(path)
    try:
        with pytest.raises(SqlRefused, match="DELETE"):
            client.sql("WITH x AS (DELETE FROM spans RETURNING 1) SELECT * FROM x")
        with pytest.raises(SqlRefused, match="enable_logging"):
            client.sql("SELECT * FROM enable_logging()")
        assert client.sql("SELECT count(*) AS n FROM spans").to_dicts() == [{"n": 0}]
    finally:
        client.close()


def test_the_lake_check_refuses_what_only_the_lakes_duckdb_has_and_other_databases():
    """check_lake_read_only against a lake DuckDB described by hand: its extension's functions, its volatile
    scalars and its other databases are refused; what lousho's DuckDB knows and reads stays allowed."""
    lake_functions = [LakeFunction("postgres_query", True, False), LakeFunction("lake_only_scalar", False, False),
                      LakeFunction("abs", False, False), LakeFunction("range", True, False),
                      LakeFunction("lower", False, True), LakeFunction("duckdb_secrets", True, False)]
    databases = ["lake", "memory", "system", "temp", "__ducklake_metadata_lake", "other"]
    for query in ("SELECT * FROM postgres_query('x', 'SELECT 1')", "SELECT lake_only_scalar(1)",
                  "SELECT lower('A')", "SELECT * FROM duckdb_secrets()",
                  "SELECT * FROM __ducklake_metadata_lake.public.ducklake_table",
                  'SELECT * FROM "__DuckLake_Metadata_lake".t', "SELECT * FROM other.main.t", "SELECT * FROM other.t",
                  "SELECT x FROM (SELECT * FROM __ducklake_metadata_lake.t) s",
                  "SELECT * FROM histogram_values('__ducklake_metadata_lake.t', c)"):
        with pytest.raises(SqlRefused):
            check_lake_read_only(query, lake_functions, databases)
    for query in ("SELECT abs(-1) FROM spans", "SELECT * FROM range(3)", "SELECT count(*) FROM lake.main.spans",
                  "SELECT * FROM information_schema.tables"):
        check_lake_read_only(query, lake_functions, databases)
