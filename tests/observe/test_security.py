"""The SQL API is read-only with no file or network access; a token guards a daemon that has one."""

from __future__ import annotations

import json
import subprocess
import sys

import grpc
import pytest
from daemon_support import get, post, sql
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon

REFUSED = [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM 'http://127.0.0.1:9/x.csv'",
    "COPY spans TO '/tmp/lousho-stolen.csv'",
    "COPY (SELECT 1) TO '/tmp/lousho-stolen.parquet' (FORMAT parquet)",
    "INSERT INTO spans SELECT * FROM spans",
    "DELETE FROM spans",
    "UPDATE spans SET name = 'x'",
    "DROP TABLE spans",
    "CREATE TABLE stolen AS SELECT 1",
    "ATTACH '/tmp/lousho-other.duckdb' AS other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "RESET enable_external_access",
    "PRAGMA enable_profiling",
    "CALL pragma_version()",
    "SELECT 1; DROP TABLE spans",
    "SELECT * FROM query('DELETE FROM spans')",
    "EXPORT DATABASE '/tmp/lousho-export'",
]


@pytest.mark.system
@pytest.mark.parametrize("query", REFUSED)
def test_sql_api_refuses_writes_files_network_and_settings(shared_daemon, query):
    trace_id, span_id = new_ids()
    post(shared_daemon.url, "/v1/traces", request([chat_span(trace_id, span_id)]).SerializeToString(),
         "application/x-protobuf")
    before = sql(shared_daemon.url, "SELECT count(*) AS n FROM spans")
    reply = post(shared_daemon.url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json")
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["code"] in ("LOUSHO_SQL_REFUSED", "LOUSHO_SQL_FAILED")
    assert error["message"] and error["hint"]
    assert sql(shared_daemon.url, "SELECT count(*) AS n FROM spans") == before
    assert sql(shared_daemon.url, "SELECT current_setting('enable_external_access') AS v") == [{"v": False}]


@pytest.mark.system
def test_sql_api_answers_selects_in_json_and_arrow(shared_daemon):
    assert sql(shared_daemon.url, "SELECT ? + 1 AS n, ? AS s", [41, "x"]) == [{"n": 42, "s": "x"}]
    reply = post(shared_daemon.url, "/v1/sql", json.dumps({"query": "SELECT 1 AS one"}).encode(),
                 "application/json", accept="application/vnd.apache.arrow.stream")
    import pyarrow as pa

    assert pa.ipc.open_stream(reply.body).read_all().to_pylist() == [{"one": 1}]


@pytest.mark.system
def test_token_guards_every_endpoint_but_healthz(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb", "--token", "s3cret")
    try:
        body = request([chat_span(*new_ids())]).SerializeToString()
        assert post(daemon.url, "/v1/traces", body, "application/x-protobuf").status == 401
        assert post(daemon.url, "/v1/traces", body, "application/x-protobuf",
                    authorization="Bearer wrong").status == 401
        assert post(daemon.url, "/v1/sql", b'{"query": "SELECT 1"}', "application/json").status == 401
        assert get(daemon.url, "/metrics").status == 401
        assert get(daemon.url, "/healthz").status == 200
        assert post(daemon.url, "/v1/traces", body, "application/x-protobuf",
                    authorization="Bearer s3cret").status == 200
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans", authorization="Bearer s3cret") == [{"n": 1}]
        with grpc.insecure_channel(daemon.grpc_target) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Export(req, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            stub.Export(req, timeout=10, metadata=(("authorization", "Bearer s3cret"),))
    finally:
        assert daemon.stop() == 0


@pytest.mark.system
def test_daemon_refuses_a_non_loopback_host_without_a_token(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "lousho", "observe", "--db", str(tmp_path / "o.duckdb"), "--host", "0.0.0.0",
         "--port", "0", "--grpc-port", "-1"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "LOUSHO_OBSERVE_UNSAFE_BIND" in result.stderr and "--token" in result.stderr
    assert not (tmp_path / "o.duckdb").exists()


@pytest.mark.system
def test_default_bind_is_loopback(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb")
    try:
        assert daemon.url.startswith("http://127.0.0.1:")
        assert daemon.grpc_target.startswith("127.0.0.1:")
    finally:
        assert daemon.stop() == 0
