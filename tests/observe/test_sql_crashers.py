"""Functions that take the daemon down, or run SQL text the check cannot read, are refused by name.

``json_contains`` recurses once per nesting level of its JSON: 300,000 nested brackets (a query of 80
characters) overflow the stack of the thread running it, and DuckDB runs the SQL API's queries inside the
daemon's process, so one query was a segmentation fault of the daemon. ``json_serialize_plan`` binds and
plans the SQL text it is given as a string, past the check that reads the query's parse tree.
"""

from __future__ import annotations

import json

import pytest
from daemon_support import get, post, sql
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon
from lousho.observe.errors import SqlRefused
from lousho.observe.sql.sql_guard import check_lake_read_only

DEEP = "repeat('[', 300000) || repeat(']', 300000)"
CRASHERS = [
    (f"SELECT json_contains({DEEP}, {DEEP}) AS c", "json_contains"),
    (f"SELECT count(*) AS n FROM range(1) WHERE json_contains({DEEP}::JSON, {DEEP})", "json_contains"),
    (f"SELECT list_transform([{DEEP}], x -> main.JSON_CONTAINS(x, x)) AS c", "json_contains"),
    ("SELECT json_serialize_plan('SELECT * FROM checkpoint()') AS p", "json_serialize_plan"),
]


@pytest.mark.system
def test_a_query_that_overflowed_duckdbs_stack_is_refused_and_the_daemon_lives(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb")
    try:
        for query, function in CRASHERS:
            reply = post(daemon.url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json")
            assert reply.status == 400, reply.body[:300]
            error = reply.json()["error"]
            assert error["code"] == "LOUSHO_SQL_REFUSED" and f"{function}()" in error["message"], error
            with pytest.raises(SqlRefused, match=function):
                check_lake_read_only(query, [], ["lake", "memory", "system", "temp"])
        # Alive: it acks an export and answers; other JSON functions still work.
        trace_id, span_id = new_ids()
        body = request([chat_span(trace_id, span_id)]).SerializeToString()
        assert post(daemon.url, "/v1/traces", body, "application/x-protobuf").status == 200
        assert sql(daemon.url, "SELECT json_extract('{\"a\": [1]}', '$.a[0]')::INT AS v") == [{"v": 1}]
        assert get(daemon.url, "/healthz").json() == {"status": "ok"}
    finally:
        assert daemon.stop() == 0
