"""--token-file keeps the token out of the process list; the Bearer scheme is case-insensitive."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from daemon_support import get, post, sql
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import DaemonProcess, start_daemon

TOKEN = "t0k-3n_from.a-file"
QUERY = b'{"query": "SELECT 1 AS one"}'


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, token_file) -> Iterator[DaemonProcess]:
    process = start_daemon(tmp_path_factory.mktemp("guarded") / "o.duckdb", "--token-file", str(token_file))
    try:
        yield process
    finally:
        assert process.stop() == 0, "\n".join(process.output[-30:])


def _lousho(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "LOUSHO_TOKEN"}
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True,
                          timeout=60, env={**environ, **(env or {})})


@pytest.mark.system
def test_the_daemon_reads_its_token_from_the_file_and_not_the_command_line(guarded):
    cmdline = Path(f"/proc/{guarded.pid}/cmdline").read_bytes()
    assert TOKEN.encode() not in cmdline
    assert post(guarded.url, "/v1/sql", QUERY, "application/json").status == 401
    assert post(guarded.url, "/v1/sql", QUERY, "application/json",
                authorization=f"Bearer {TOKEN}x").status == 401
    assert post(guarded.url, "/v1/sql", QUERY, "application/json",
                authorization=f"Bearer {TOKEN}").status == 200


@pytest.mark.system
@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
def test_the_bearer_scheme_is_case_insensitive_on_http(guarded, scheme):
    reply = post(guarded.url, "/v1/sql", QUERY, "application/json", authorization=f"{scheme} {TOKEN}")
    assert reply.status == 200, reply.body
    assert post(guarded.url, "/v1/sql", QUERY, "application/json",
                authorization=f"{scheme} wrong").status == 401
    # The page takes the same header as the API.
    assert get(guarded.url, "/", authorization=f"{scheme} {TOKEN}").status == 200
    assert get(guarded.url, "/", authorization=f"{scheme} wrong").status == 401


@pytest.mark.system
@pytest.mark.parametrize("scheme", ["bearer", "BEARER"])
def test_the_bearer_scheme_is_case_insensitive_on_grpc(guarded, scheme):
    assert guarded.grpc_target is not None
    req = request([chat_span(*new_ids())])
    with grpc.insecure_channel(guarded.grpc_target) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        stub.Export(req, timeout=10, metadata=(("authorization", f"{scheme} {TOKEN}"),))
        with pytest.raises(grpc.RpcError) as refused:
            stub.Export(trace_service_pb2.ExportTraceServiceRequest(), timeout=10,
                        metadata=(("authorization", f"{scheme} wrong"),))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.system
def test_client_commands_read_the_token_file(guarded, token_file):
    done = _lousho("sql", "--url", guarded.url, "--token-file", str(token_file), "--json", "SELECT 1 AS one")
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"one":1' in done.stdout.replace(" ", "")
    runs = _lousho("runs", "--url", guarded.url, "--token-file", str(token_file), "--json")
    assert runs.returncode == 0, runs.stdout + runs.stderr
    without = _lousho("sql", "--url", guarded.url, "SELECT 1")
    assert without.returncode == 1
    assert "LOUSHO_OBSERVE_UNAUTHORIZED" in without.stdout + without.stderr


@pytest.mark.system
@pytest.mark.parametrize("content", [None, "", "\n"])
def test_a_missing_or_empty_token_file_is_a_usage_error(tmp_path, content):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    daemon = _lousho("observe", "--db", str(tmp_path / "o.duckdb"), "--port", "0", "--grpc-port", "-1",
                     "--token-file", str(path))
    client = _lousho("sql", "--url", "http://127.0.0.1:9", "--token-file", str(path), "SELECT 1")
    for done in (daemon, client):
        assert done.returncode == 2, done.stdout + done.stderr
        assert "LOUSHO_OBSERVE_TOKEN_FILE" in done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "o.duckdb").exists()


@pytest.mark.system
def test_a_token_flag_and_a_token_file_together_are_a_usage_error(tmp_path, token_file):
    done = _lousho("observe", "--db", str(tmp_path / "o.duckdb"), "--port", "0", "--grpc-port", "-1",
                   "--token", "other", "--token-file", str(token_file))
    assert done.returncode == 2
    assert "LOUSHO_OBSERVE_TOKEN_TWICE" in done.stdout + done.stderr


@pytest.mark.system
def test_a_token_on_the_command_line_warns_that_the_process_list_shows_it(tmp_path, token_file):
    flagged = start_daemon(tmp_path / "a.duckdb", "--token", TOKEN)
    try:
        assert TOKEN.encode() in Path(f"/proc/{flagged.pid}/cmdline").read_bytes()
        warning = [line for line in flagged.output if "visible" in line and "process list" in line]
        assert warning and "--token-file" in warning[0], flagged.output
        assert TOKEN not in warning[0]  # the warning does not print the secret it warns about
    finally:
        assert flagged.stop() == 0
    for how in (("--token-file", str(token_file)), ()):
        env = {} if how else {"LOUSHO_TOKEN": TOKEN}
        quiet = start_daemon(tmp_path / f"b{len(how)}.duckdb", *how, env=env)
        try:
            assert not [line for line in quiet.output if "process list" in line], quiet.output
        finally:
            assert quiet.stop() == 0


SPACED = "correct horse battery"


@pytest.mark.system
def test_a_token_with_a_space_inside_goes_through_the_sdk_exporters_at_their_defaults(tmp_path, monkeypatch):
    """Start accepts a space inside a token because both transports carry it: the real OTel exporters are let
    in when lousho's helper gives it (HTTP and gRPC) and when a user gives it in OTEL_EXPORTER_OTLP_HEADERS
    (URL-encoded, as the spec asks; HTTP), and a wrong token given that way is kept out."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from lousho.observe import instrument

    (tmp_path / "spaced.tok").write_text(SPACED + "\n")
    process = start_daemon(tmp_path / "o.duckdb", "--token-file", str(tmp_path / "spaced.tok"))
    try:
        assert process.grpc_target is not None
        for name, endpoint, protocol in (("http", process.url, "http/protobuf"),
                                         ("grpc", f"http://{process.grpc_target}", "grpc")):
            provider = instrument(f"spaced-{name}", endpoint, protocol=protocol, token=SPACED)
            provider.get_tracer("t").start_span(f"helper-{name}").end()
            provider.shutdown()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20correct%20horse%20battery")
        provider = TracerProvider(resource=Resource.create({"service.name": "spaced-env"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{process.url}/v1/traces")))
        provider.get_tracer("t").start_span("env-http").end()
        provider.shutdown()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20correct%20horse")
        provider = TracerProvider(resource=Resource.create({"service.name": "spaced-wrong"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{process.url}/v1/traces")))
        provider.get_tracer("t").start_span("wrong-http").end()
        provider.shutdown()

        names = sql(process.url, "SELECT name FROM spans ORDER BY name", authorization=f"Bearer {SPACED}")
        assert [row["name"] for row in names] == ["env-http", "helper-grpc", "helper-http"]
    finally:
        assert process.stop() == 0, "\n".join(process.output[-30:])
