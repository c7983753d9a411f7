"""Bad input gets a clear answer, loses nothing, and the daemon keeps serving."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest
from daemon_support import get, metric, post, sql
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon

PROTOBUF = "application/x-protobuf"


def _still_serving(url: str) -> None:
    assert get(url, "/healthz").status == 200
    trace_id, span_id = new_ids()
    body = request([chat_span(trace_id, span_id)]).SerializeToString()
    assert post(url, "/v1/traces", body, PROTOBUF).status == 200
    assert sql(url, "SELECT count(*) AS n FROM spans WHERE trace_id = ?", [trace_id.hex()]) == [{"n": 1}]


@pytest.mark.system
def test_undecodable_protobuf_gets_400_with_a_google_rpc_status(shared_daemon):
    reply = post(shared_daemon.url, "/v1/traces", b"\xff\xff\xff\xff not protobuf", PROTOBUF)
    assert reply.status == 400
    assert reply.headers["content-type"] == PROTOBUF
    status = status_pb2.Status.FromString(reply.body)
    assert status.code == 3 and "LOUSHO_OBSERVE_BAD_PAYLOAD" in status.message
    _still_serving(shared_daemon.url)


@pytest.mark.system
def test_undecodable_json_gets_400_with_a_status_in_json(shared_daemon):
    reply = post(shared_daemon.url, "/v1/traces", b"{not json", "application/json")
    assert reply.status == 400
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["code"] == 3 and "not valid JSON" in reply.json()["message"]
    _still_serving(shared_daemon.url)


@pytest.mark.system
def test_a_logs_payload_is_refused_with_a_hint(shared_daemon):
    reply = post(shared_daemon.url, "/v1/traces", b'{"resourceLogs": []}', "application/json")
    assert reply.status == 400
    assert "logs or metrics payload" in reply.json()["message"]


@pytest.mark.system
def test_wrong_content_type_gets_415_naming_the_supported_types(shared_daemon):
    reply = post(shared_daemon.url, "/v1/traces", b"hello", "text/plain")
    assert reply.status == 415
    message = status_pb2.Status.FromString(reply.body).message
    assert "application/x-protobuf" in message or "text/plain" in message
    _still_serving(shared_daemon.url)


@pytest.mark.system
def test_malformed_span_inside_a_good_batch_is_a_partial_success(shared_daemon):
    trace_id, good_id = new_ids()
    bad = Span(trace_id=b"\x01\x02\x03", span_id=b"\x01" * 8, name="bad-trace-id")
    zero = Span(trace_id=trace_id, span_id=b"\x00" * 8, name="zero-span-id")
    body = request([chat_span(trace_id, good_id), bad, zero]).SerializeToString()
    reply = post(shared_daemon.url, "/v1/traces", body, PROTOBUF)
    assert reply.status == 200
    partial = ExportTraceServiceResponse.FromString(reply.body).partial_success
    assert partial.rejected_spans == 2
    assert "bad-trace-id" in partial.error_message and "zero-span-id" in partial.error_message
    assert sql(shared_daemon.url, "SELECT span_id FROM spans WHERE trace_id = ?", [trace_id.hex()]) == [
        {"span_id": good_id.hex()}
    ]


@pytest.mark.system
def test_malformed_json_span_is_rejected_alone(shared_daemon):
    trace_id, span_id = new_ids()
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": trace_id.hex(), "spanId": span_id.hex(), "name": "good", "kind": 1},
        {"traceId": "zz-not-hex", "spanId": span_id.hex(), "name": "bad-hex"},
        {"traceId": trace_id.hex(), "spanId": "0102030405060708", "name": "bad-time",
         "startTimeUnixNano": "yesterday"},
    ]}]}]}
    reply = post(shared_daemon.url, "/v1/traces", json.dumps(doc).encode(), "application/json")
    assert reply.status == 200
    assert reply.json()["partialSuccess"]["rejectedSpans"] in ("2", 2)
    assert sql(shared_daemon.url, "SELECT name FROM spans WHERE trace_id = ?", [trace_id.hex()]) == [
        {"name": "good"}
    ]


@pytest.mark.system
@pytest.mark.parametrize(("body", "ctype"), [(b"", PROTOBUF), (b"{}", "application/json"),
                                             (b'{"resourceSpans": []}', "application/json")])
def test_empty_request_gets_200(shared_daemon, body, ctype):
    reply = post(shared_daemon.url, "/v1/traces", body, ctype)
    assert reply.status == 200
    assert reply.headers["content-type"] == ctype


@pytest.mark.system
def test_gzip_body_is_inflated_and_bad_gzip_is_400(shared_daemon):
    trace_id, span_id = new_ids()
    body = gzip.compress(request([chat_span(trace_id, span_id)]).SerializeToString())
    assert post(shared_daemon.url, "/v1/traces", body, PROTOBUF, **{"content-encoding": "gzip"}).status == 200
    assert sql(shared_daemon.url, "SELECT count(*) AS n FROM spans WHERE trace_id = ?", [trace_id.hex()]) == [
        {"n": 1}
    ]
    reply = post(shared_daemon.url, "/v1/traces", b"\x1f\x8bnot gzip at all", PROTOBUF,
                 **{"content-encoding": "gzip"})
    assert reply.status == 400
    reply = post(shared_daemon.url, "/v1/traces", body, PROTOBUF, **{"content-encoding": "br"})
    assert reply.status == 415
    _still_serving(shared_daemon.url)


@pytest.mark.system
def test_every_gzip_member_is_inflated_and_trailing_garbage_is_400(shared_daemon):
    # Two members, as a client that compresses in pieces sends: the inflated bytes are two requests one after
    # the other, which protobuf reads as one request holding the spans of both.
    trace_id = new_ids()[0]
    parts = [request([chat_span(trace_id, new_ids()[1])]).SerializeToString() for _ in range(2)]
    members = gzip.compress(parts[0]) + b"\0" * 8 + gzip.compress(parts[1])  # zero padding, as gzip allows
    assert post(shared_daemon.url, "/v1/traces", members, PROTOBUF, **{"content-encoding": "gzip"}).status == 200
    assert sql(shared_daemon.url, "SELECT count(*) AS n FROM spans WHERE trace_id = ?", [trace_id.hex()]) == [
        {"n": 2}
    ]
    for trailing in (b"trailing garbage", gzip.compress(b"x")[:5]):  # not a member; a member cut short
        reply = post(shared_daemon.url, "/v1/traces", gzip.compress(parts[0]) + trailing, PROTOBUF,
                     **{"content-encoding": "gzip"})
        assert reply.status == 400
        assert "LOUSHO_OBSERVE_BAD_ENCODING" in status_pb2.Status.FromString(reply.body).message
    reply = post(shared_daemon.url, "/v1/traces", zlib.compress(parts[0]) + b"more", PROTOBUF,
                 **{"content-encoding": "deflate"})
    assert reply.status == 400
    _still_serving(shared_daemon.url)


def _vm_hwm_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.system
@pytest.mark.slow
def test_gzip_bomb_gets_413_without_memory_growing_past_the_limit(tmp_path):
    limit_mib = 16
    daemon = start_daemon(tmp_path / "o.duckdb", "--max-body-mib", str(limit_mib))
    try:
        inflater = zlib.compressobj(9, zlib.DEFLATED, 31)
        zeros = b"\0" * (1 << 20)
        bomb = b"".join(inflater.compress(zeros) for _ in range(1024)) + inflater.flush()
        assert len(bomb) < 2 * 1024 * 1024  # 1 GiB inflated, about 1 MiB on the wire
        before = _vm_hwm_bytes(daemon.pid)
        for _ in range(3):
            reply = post(daemon.url, "/v1/traces", bomb, PROTOBUF, **{"content-encoding": "gzip"})
            assert reply.status == 413
            assert "limit" in status_pb2.Status.FromString(reply.body).message
        growth = _vm_hwm_bytes(daemon.pid) - before
        # Inflating stops at the limit, so the peak can grow by the limit (the inflated bytes held
        # until then) plus the 1 MiB on the wire and allocator slack, never by the 1 GiB the bomb holds.
        assert growth < (limit_mib + 8) * 1024 * 1024, f"peak memory grew {growth / 2**20:.1f} MiB"
        plain = b"\0" * ((limit_mib << 20) + 1)
        assert post(daemon.url, "/v1/traces", plain, PROTOBUF).status == 413
        _still_serving(daemon.url)
    finally:
        assert daemon.stop() == 0


@pytest.mark.system
@pytest.mark.parametrize("body", [
    b'{"resourceSpans": [{"scopeSpans": true}]}',
    b'{"resourceSpans": true}',
    b'{"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]}',
    b'{"resourceSpans": [{"resource": 5}]}',
    b'[1, 2]',
    b'{"resourceSpans": [[[[[[[[[[]]]]]]]]]]}',
])
def test_json_of_the_wrong_shape_is_400_not_500(shared_daemon, body):
    assert post(shared_daemon.url, "/v1/traces", body, "application/json").status == 400




@pytest.mark.system
def test_a_span_repeating_an_earlier_ones_ids_in_its_request_is_rejected_not_lost_silently(shared_daemon):
    """The store keeps a (trace id, span id) once. Within one request a repeat is no retry: an id generator
    that wraps (here, the real SDK's BatchSpanProcessor and exporter at their defaults, given one) or a bad merge
    made it, and the second span would vanish unreported. It is refused with partial success instead, counted
    in lousho_spans_rejected_total, and the first is kept: over HTTP protobuf, OTLP/JSON and gRPC alike."""
    import grpc
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    trace_id, first_id = new_ids()
    second_id = (int.from_bytes(first_id, "big") ^ 1).to_bytes(8, "big")

    class WrappingIds(IdGenerator):
        """A span id from a counter that wraps after two: a bug, but one the receiver must not hide."""

        def __init__(self) -> None:
            self.made = 0

        def generate_trace_id(self) -> int:
            return int.from_bytes(trace_id, "big")

        def generate_span_id(self) -> int:
            self.made += 1
            return int.from_bytes(first_id if self.made % 2 else second_id, "big")

    rejected = metric(shared_daemon.url, "lousho_spans_rejected_total")
    provider = TracerProvider(resource=Resource.create({"service.name": "wrapping-ids"}), id_generator=WrappingIds())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{shared_daemon.url}/v1/traces")))
    tracer = provider.get_tracer("t")
    for name in ("one", "two", "three", "four", "five"):
        tracer.start_span(name).end()
    provider.shutdown()  # one export of all five: the batch holds up to 512
    stored = sql(shared_daemon.url, "SELECT name FROM spans WHERE trace_id = ? ORDER BY name", [trace_id.hex()])
    assert stored == [{"name": "one"}, {"name": "two"}]
    assert metric(shared_daemon.url, "lousho_spans_rejected_total") - rejected == 3

    trace_id, span_id = new_ids()
    spans = [chat_span(trace_id, span_id), chat_span(trace_id, span_id)]
    spans[1].name = "the-repeat"
    reply = post(shared_daemon.url, "/v1/traces", request(spans).SerializeToString(), PROTOBUF)
    partial = ExportTraceServiceResponse.FromString(reply.body).partial_success
    assert reply.status == 200 and partial.rejected_spans == 1
    assert "'the-repeat': has the key of an earlier span of this request" in partial.error_message
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": trace_id.hex(), "spanId": span_id.hex(), "name": name} for name in ("json-a", "json-b")]}]}]}
    reply = post(shared_daemon.url, "/v1/traces", json.dumps(doc).encode(), "application/json")
    # json-b repeats json-a; json-a repeats only the last request's span, as a retry would: stored once, not refused.
    assert reply.json()["partialSuccess"]["rejectedSpans"] in ("1", 1)
    assert "'json-b'" in reply.json()["partialSuccess"]["errorMessage"]
    with grpc.insecure_channel(shared_daemon.grpc_target) as channel:
        answer = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request(spans), timeout=10)
    assert answer.partial_success.rejected_spans == 1
    assert sql(shared_daemon.url, "SELECT name FROM spans WHERE trace_id = ?", [trace_id.hex()]) == [
        {"name": spans[0].name}]
