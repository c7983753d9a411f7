"""A value the store cannot hold never costs the spans beside it: the column is NULL, the raw
attribute keeps the original, and only a span whose own identity or times cannot be stored is
rejected, in a partial success. Protobuf, OTLP/JSON and gRPC alike."""

from __future__ import annotations

import json

import grpc
import pytest
from daemon_support import get, post, sql
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from otlp_bodies import NS, chat_span, kv, new_ids, request, to_json

from lousho.observe import instrument
from lousho.observe.decode import otlp_decode, otlp_json_native
from lousho.observe.store.span_store import arrow_batch

PROTOBUF = "application/x-protobuf"
PAST_INT64 = 2**64 - 1


def _batch(trace_id: bytes) -> tuple[list, dict[str, bytes]]:
    """Good spans, spans with values no column can hold, and one span whose end time cannot be stored."""
    ids = {name: new_ids()[1] for name in ("good", "tokens", "digits", "cost", "score", "late")}
    good = chat_span(trace_id, ids["good"])
    tokens = chat_span(trace_id, ids["tokens"], **{"gen_ai.usage.input_tokens": 1e30})
    digits = chat_span(trace_id, ids["digits"], **{"gen_ai.usage.output_tokens": "12345678901234567890"})
    cost = chat_span(trace_id, ids["cost"], **{"lousho.cost.usd": "1e400"})
    score = chat_span(trace_id, ids["score"])
    event = score.events.add(name="gen_ai.evaluation.result", time_unix_nano=PAST_INT64)
    event.attributes.extend([kv("gen_ai.evaluation.name", "tests"), kv("gen_ai.evaluation.score.value",
                                                                        float("inf"))])
    late = chat_span(trace_id, ids["late"])
    late.name = "late-span"
    late.end_time_unix_nano = PAST_INT64
    return [good, tokens, digits, cost, score, late], ids


def _assert_stored(url: str, trace_id: bytes, ids: dict[str, bytes]) -> None:
    rows = {r["span_id"]: r for r in sql(
        url, "SELECT span_id, input_tokens, output_tokens, cost_usd, attributes FROM spans WHERE trace_id = ?",
        [trace_id.hex()])}
    assert set(rows) == {ids[n].hex() for n in ("good", "tokens", "digits", "cost", "score")}
    assert rows[ids["good"].hex()]["input_tokens"] == 120
    tokens = rows[ids["tokens"].hex()]
    assert tokens["input_tokens"] is None and tokens["output_tokens"] == 30
    assert json.loads(tokens["attributes"])["gen_ai.usage.input_tokens"] == 1e30
    digits = rows[ids["digits"].hex()]
    assert digits["output_tokens"] is None
    assert json.loads(digits["attributes"])["gen_ai.usage.output_tokens"] == "12345678901234567890"
    cost = rows[ids["cost"].hex()]
    assert cost["cost_usd"] is None and json.loads(cost["attributes"])["lousho.cost.usd"] == "1e400"
    scores = sql(url, "SELECT name, score_value, time_ns FROM scores WHERE trace_id = ?", [trace_id.hex()])
    # The score's time falls back to its span's end; its value, not finite, is NULL.
    assert scores == [{"name": "tests", "score_value": None, "time_ns": NS + 5_000_000}]
    events = sql(url, "SELECT events FROM spans WHERE span_id = ?", [ids["score"].hex()])
    assert json.loads(events[0]["events"])[0]["time_ns"] == PAST_INT64


def _nulled(url: str) -> int:
    for line in get(url, "/metrics").body.decode().splitlines():
        if line.startswith("lousho_values_nulled_total "):
            return int(line.split()[1])
    raise AssertionError("no lousho_values_nulled_total in /metrics")


@pytest.mark.system
def test_protobuf_batch_with_unrepresentable_values_keeps_every_storable_span(daemon):
    trace_id = new_ids()[0]
    spans, ids = _batch(trace_id)
    reply = post(daemon.url, "/v1/traces", request(spans).SerializeToString(), PROTOBUF)
    assert reply.status == 200, reply.body
    partial = ExportTraceServiceResponse.FromString(reply.body).partial_success
    assert partial.rejected_spans == 1 and "late-span" in partial.error_message
    _assert_stored(daemon.url, trace_id, ids)
    # input tokens, output tokens, cost, score value, score time
    assert _nulled(daemon.url) == 5


@pytest.mark.system
def test_json_batch_with_unrepresentable_values_keeps_every_storable_span(daemon):
    trace_id = new_ids()[0]
    spans, ids = _batch(trace_id)
    doc = json.loads(to_json(request(spans)))
    # Values OTLP/JSON can carry but protobuf cannot: an integer past int64, a double past float64.
    extra = chat_span(trace_id, new_ids()[1])
    doc_extra = json.loads(to_json(request([extra])))["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    for attribute in doc_extra["attributes"]:
        if attribute["key"] == "gen_ai.usage.input_tokens":
            attribute["value"] = {"intValue": "123456789012345678901"}
    doc_extra["attributes"].append({"key": "lousho.cost.usd", "value": {"doubleValue": "BIG"}})
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append(doc_extra)
    body = json.dumps(doc).replace('"BIG"', "1e400").encode()
    reply = post(daemon.url, "/v1/traces", body, "application/json")
    assert reply.status == 200, reply.body
    partial = reply.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1 and "late-span" in partial["errorMessage"]
    extra_row = sql(daemon.url, "SELECT input_tokens, cost_usd, attributes FROM spans WHERE span_id = ?",
                    [extra.span_id.hex()])
    assert extra_row[0]["input_tokens"] is None and extra_row[0]["cost_usd"] is None
    attrs = json.loads(extra_row[0]["attributes"])
    assert attrs["gen_ai.usage.input_tokens"] == "123456789012345678901"
    assert attrs["lousho.cost.usd"] == "Infinity"
    rows = sql(daemon.url, "SELECT count(*) AS n FROM spans WHERE trace_id = ?", [trace_id.hex()])
    assert rows == [{"n": 6}]


@pytest.mark.system
def test_grpc_batch_with_unrepresentable_values_keeps_every_storable_span(daemon):
    trace_id = new_ids()[0]
    spans, ids = _batch(trace_id)
    with grpc.insecure_channel(daemon.grpc_target) as channel:
        response = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request(spans), timeout=30)
    assert response.partial_success.rejected_spans == 1
    assert "late-span" in response.partial_success.error_message
    _assert_stored(daemon.url, trace_id, ids)


@pytest.mark.system
def test_the_sdk_grpc_exporter_loses_no_span_to_an_out_of_range_value(daemon):
    provider = instrument("range-test", f"http://{daemon.grpc_target}", protocol="grpc")
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("chat big", attributes={
        "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 1e30,
        "gen_ai.usage.output_tokens": "99999999999999999999", "lousho.run.id": "range-run",
    }) as span:
        span.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "tests",
                                                    "gen_ai.evaluation.score.value": float("nan")})
        with tracer.start_as_current_span("chat small", attributes={"gen_ai.usage.input_tokens": 7}):
            pass
    provider.shutdown()
    rows = sql(daemon.url, "SELECT name, input_tokens, output_tokens FROM spans WHERE service_name = ? "
                           "ORDER BY name", ["range-test"])
    assert rows == [{"name": "chat big", "input_tokens": None, "output_tokens": None},
                    {"name": "chat small", "input_tokens": 7, "output_tokens": None}]
    assert sql(daemon.url, "SELECT score_value FROM scores WHERE run_id = 'range-run'") == [{"score_value": None}]


@pytest.mark.parametrize(("digits", "stored"), [("9" * 400, "Infinity"), ("-" + "9" * 400, "-Infinity")])
def test_a_json_double_written_as_an_integer_past_float64_is_kept_as_an_infinite_double(digits, stored):
    """``"doubleValue": 999...9`` (400 digits) is the same value as ``1e400``: kept as the mapping's infinity,
    not a server error (it raised OverflowError, which reached the client as a 500)."""
    trace_id, span_id = new_ids()
    doc = json.loads(to_json(request([chat_span(trace_id, span_id)])))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"].append(
        {"key": "lousho.cost.usd", "value": {"doubleValue": "BIG"}})
    body = json.dumps(doc).replace('"BIG"', digits).encode()
    for decode in (otlp_decode.decode_json, otlp_json_native.decode_json):
        decoded = decode(body)
        spans = arrow_batch(decoded).spans.to_pydict()
        assert decoded.rejected == 0 and spans["cost_usd"] == [None]
        assert json.loads(spans["attributes"][0])["lousho.cost.usd"] == stored


def test_a_resource_double_past_float64_is_a_bad_payload_not_a_server_error():
    """Outside a span's own attributes nothing keeps the value: the body is refused as malformed (400), as the
    reference refuses any shape it cannot map, by both decoders."""
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "x", "value": {"doubleValue": "BIG"}}]}, "scopeSpans": []}]}).replace('"BIG"', "9" * 400).encode()
    for decode in (otlp_decode.decode_json, otlp_json_native.decode_json):
        with pytest.raises(otlp_decode.BadPayload, match="OverflowError"):
            decode(body)
