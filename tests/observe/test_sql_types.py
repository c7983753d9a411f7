"""Every DuckDB type gets an answer: JSON by the documented mapping, Arrow, and ``lousho sql`` output."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import duckdb
import pyarrow as pa
import pytest
from daemon_support import post
from duckdb.sqltypes import BIGINT

from lousho.observe.sql import query as sql_api

ARROW = "application/vnd.apache.arrow.stream"

# One query per shape that used to answer 500 (JSON) or a traceback (CLI), and what JSON must say.
SHAPES = [
    ("SELECT 1 AS a, 2 AS a", {"a": 1, "a_2": 2}),
    ("SELECT INTERVAL 1 MONTH + INTERVAL 3 DAY + INTERVAL 5 MICROSECOND AS i",
     {"i": {"months": 1, "days": 3, "micros": 5}}),
    ("SELECT MAP {'k': 1, 'j': 2} AS m", {"m": [{"key": "k", "value": 1}, {"key": "j", "value": 2}]}),
    ("SELECT '\\xAA\\x00'::BLOB AS b", {"b": "qgA="}),
    ("SELECT 170141183460469231731687303715884105727::HUGEINT AS h, 7::HUGEINT AS s",
     {"h": "170141183460469231731687303715884105727", "s": "7"}),
    ("SELECT 340282366920938463463374607431768211455::UHUGEINT AS u", {"u": "340282366920938463463374607431768211455"}),
    ("SELECT ('1' || repeat('0', 50))::BIGNUM AS g", {"g": "1" + "0" * 50}),
    ("SELECT union_value(n := 2)::UNION(s VARCHAR, n INTEGER) AS u", {"u": 2}),
    ("SELECT 'b'::ENUM('a', 'b') AS e", {"e": "b"}),
    ("SELECT '12:30:00+02'::TIMETZ AS t", {"t": "12:30:00+02"}),
    ("SELECT 'infinity'::TIMESTAMP AS t, '-infinity'::TIMESTAMPTZ AS z, 'infinity'::DATE AS d",
     {"t": "infinity", "z": "-infinity", "d": "infinity"}),
    ("SELECT TIMESTAMP '2024-02-29 01:02:03.000004' AS t, DATE '2024-02-29' AS d",
     {"t": "2024-02-29T01:02:03.000004", "d": "2024-02-29"}),
    ("SELECT 'nan'::DOUBLE AS n, '-inf'::DOUBLE AS i, 1.5::DECIMAL(4, 2) AS d",
     {"n": "NaN", "i": "-Infinity", "d": "1.50"}),
    ("SELECT {'i': INTERVAL 2 DAY, 'b': '\\x01'::BLOB, 't': ['infinity'::TIMESTAMP]} AS s",
     {"s": {"i": {"months": 0, "days": 2, "micros": 0}, "b": "AQ==", "t": ["infinity"]}}),
    ("SELECT [MAP {1: 'x'}] AS l, [1, 2]::INTEGER[2] AS a", {"l": [[{"key": 1, "value": "x"}]], "a": [1, 2]}),
    ("SELECT '101'::BIT AS b", {"b": "101"}),
]


def test_a_hugeint_answer_is_computed_once_and_reads_as_duckdbs_own_text():
    # A sum of integers is a HUGEINT, which Arrow cannot carry faithfully: the answer gives it as DuckDB's text.
    # Taken from the rows already computed (their decimal128 form), not by running the query a second time.
    con = duckdb.connect()
    calls: list[int] = []
    con.create_function("counted", lambda x: calls.append(x) or x, [BIGINT], BIGINT, side_effects=True)
    answer = sql_api.run_query(con, "SELECT sum(counted(x)) AS s, 'x' AS v FROM range(1000) t(x)").table
    assert (answer.to_pylist(), len(calls)) == ([{"s": "499500", "v": "x"}], 1000)
    extremes = ("SELECT h, h::VARCHAR AS text FROM (VALUES (170141183460469231731687303715884105727::HUGEINT), "
                "(-170141183460469231731687303715884105727::HUGEINT - 1), (-7::HUGEINT), (0::HUGEINT), (NULL)) t(h)")
    rows = sql_api.run_query(con, extremes).table.to_pylist()
    assert [r["h"] for r in rows] == [r["text"] for r in rows] and len(rows) == 5
    many = sql_api.run_query(con, "SELECT x::HUGEINT AS h FROM range(150000) t(x)", max_rows=100_000)
    assert many.truncated and many.table.column("h").to_pylist()[-2:] == ["99998", "99999"]


def _post(url: str, query: str, accept: str = "application/json"):
    return post(url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json", accept=accept)


@pytest.mark.system
@pytest.mark.parametrize(("query", "expected"), SHAPES)
def test_each_shape_has_its_documented_json_and_an_arrow_answer(shared_daemon, query, expected):
    reply = _post(shared_daemon.url, query)
    assert reply.status == 200, reply.body
    assert reply.json()["rows"] == [expected]
    arrow = _post(shared_daemon.url, query, ARROW)
    assert arrow.status == 200, arrow.body
    table = pa.ipc.open_stream(arrow.body).read_all()
    assert table.num_rows == 1 and table.column_names == reply.json()["columns"]


@pytest.mark.system
def test_duplicate_column_names_are_kept_in_columns(shared_daemon):
    doc = _post(shared_daemon.url, "SELECT 1 AS a, 2 AS a, 3 AS a_2").json()
    assert doc["columns"] == ["a", "a", "a_2"]
    assert doc["keys"] == ["a", "a_2", "a_2_2"]
    assert doc["rows"] == [{"a": 1, "a_2": 2, "a_2_2": 3}]


@pytest.mark.system
def test_every_column_of_test_all_types_answers_json_and_arrow(shared_daemon):
    columns = _post(shared_daemon.url, "SELECT * FROM test_all_types()").json()["columns"]
    assert len(columns) > 50
    for column in columns:
        query = f'SELECT "{column}" FROM test_all_types()'
        reply = _post(shared_daemon.url, query)
        assert reply.status == 200, (column, reply.body)
        assert len(reply.json()["rows"]) == 3
        arrow = _post(shared_daemon.url, query, ARROW)
        assert arrow.status == 200, (column, arrow.body)
        assert pa.ipc.open_stream(arrow.body).read_all().num_rows == 3


def _lousho_sql(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", "sql", "--url", url, *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.system
@pytest.mark.slow
def test_lousho_sql_prints_every_type_in_every_format(shared_daemon):
    query = "SELECT * FROM test_all_types()"
    for fmt in ([], ["--json"], ["--csv"]):
        done = _lousho_sql(shared_daemon.url, *fmt, query)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
    as_json = json.loads(_lousho_sql(shared_daemon.url, "--json", query).stdout)
    assert as_json[2]["interval"] is None and as_json[0]["uhugeint"] == "0"
    rows = list(csv.reader(io.StringIO(_lousho_sql(shared_daemon.url, "--csv", query).stdout)))
    assert len(rows) == 4 and rows[0][:2] == ["bool", "tinyint"]


@pytest.mark.system
@pytest.mark.slow
@pytest.mark.parametrize(("query", "expected"), SHAPES)
def test_lousho_sql_prints_each_shape(shared_daemon, query, expected):
    as_json = _lousho_sql(shared_daemon.url, "--json", query)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == [expected]
    for fmt in ([], ["--csv"]):
        done = _lousho_sql(shared_daemon.url, *fmt, query)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert done.stdout.strip()


@pytest.mark.system
def test_the_python_client_gives_a_frame_for_every_shape(shared_daemon):
    from lousho.observe.client.store_client import connect

    store = connect(shared_daemon.url)
    try:
        for query, expected in SHAPES:
            frame = store.sql(query)
            assert frame.height == 1 and frame.columns == list(expected), query
        assert store.sql("SELECT * FROM test_all_types()").height == 3
    finally:
        store.close()
