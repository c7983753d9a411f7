"""The daemon runs the native decoder when it is built, says so, and falls back to the Python one when not."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest
from daemon_support import get, post, sql
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.mark.system
def test_ready_line_and_metrics_name_the_native_decoder(daemon):
    assert any("decoder=native" in line for line in daemon.output[:3]), daemon.output[:3]
    assert 'lousho_decoder_info{decoder="native"} 1' in get(daemon.url, "/metrics").body.decode()


@pytest.mark.system
def test_a_source_tree_without_the_built_modules_runs_the_python_decoders(tmp_path):
    """Neither extension built: protobuf and OTLP/JSON both decode with the reference, and the daemon says so."""
    tree = tmp_path / "src"
    shutil.copytree(REPO / "lousho", tree / "lousho", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    # PYTHONSAFEPATH: python -m must not import the built tree from the working directory.
    process = start_daemon(tmp_path / "observe.duckdb", env={"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"})
    try:
        assert any("decoder=python" in line for line in process.output[:3]), process.output[:3]
        assert 'lousho_decoder_info{decoder="python"} 1' in get(process.url, "/metrics").body.decode()
        trace_id, span_id = new_ids()
        reply = post(process.url, "/v1/traces", request([chat_span(trace_id, span_id)]).SerializeToString(),
                     "application/x-protobuf")
        assert reply.status == 200
        assert sql(process.url, "SELECT span_id FROM spans") == [{"span_id": span_id.hex()}]
        assert any("json_decoder=python" in line for line in process.output[:3]), process.output[:3]
        assert 'lousho_json_decoder_info{decoder="python"} 1' in get(process.url, "/metrics").body.decode()
        body = (FIXTURES / "js-otlp-json.jsonl").read_bytes().splitlines()[1]
        assert post(process.url, "/v1/traces", body, "application/json").status == 200
        assert sql(process.url, "SELECT status_code FROM spans WHERE span_id != ?",
                   [span_id.hex()]) == [{"status_code": "ERROR"}]
    finally:
        assert process.stop() == 0, "\n".join(process.output[-30:])


@pytest.mark.system
def test_grpc_body_that_is_not_otlp_is_invalid_argument_and_the_daemon_keeps_serving(daemon):
    with grpc.insecure_channel(daemon.grpc_target) as channel:
        export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as refused:
            export(b"\x0a\x05\x12", timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        trace_id, span_id = new_ids()
        assert export(request([chat_span(trace_id, span_id)]).SerializeToString(), timeout=10) == b""
    assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": 1}]
    assert "lousho_requests_bad_total 1" in get(daemon.url, "/metrics").body.decode()
