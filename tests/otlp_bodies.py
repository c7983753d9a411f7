"""Hand-built OTLP request bodies for tests, in protobuf and in OTLP/JSON."""

from __future__ import annotations

import json
import os

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

NS = 1_780_000_000_000_000_000


def kv(key: str, value) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def new_ids() -> tuple[bytes, bytes]:
    return os.urandom(16), os.urandom(8)


def request(spans: list[Span], service: str = "test-agent") -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(kv("service.name", service))
    ss = rs.scope_spans.add()
    ss.scope.name = "tests"
    ss.spans.extend(spans)
    return req


def chat_span(trace_id: bytes, span_id: bytes, parent: bytes = b"", **attrs) -> Span:
    span = Span(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent, name="chat gpt-test",
        kind=Span.SPAN_KIND_CLIENT, start_time_unix_nano=NS, end_time_unix_nano=NS + 5_000_000,
        status=Status(code=Status.STATUS_CODE_OK),
    )
    base = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
    }
    span.attributes.extend(kv(k, v) for k, v in {**base, **attrs}.items())
    return span


def to_json(req: ExportTraceServiceRequest, int_as_string: bool = True) -> bytes:
    """OTLP/JSON by hand: hex ids, integer enums, 64-bit integers as strings (or numbers)."""

    def value(v: AnyValue) -> dict:
        kind = v.WhichOneof("value")
        if kind == "string_value":
            return {"stringValue": v.string_value}
        if kind == "int_value":
            return {"intValue": str(v.int_value) if int_as_string else v.int_value}
        if kind == "double_value":
            return {"doubleValue": v.double_value}
        if kind == "bool_value":
            return {"boolValue": v.bool_value}
        if kind == "array_value":
            return {"arrayValue": {"values": [value(x) for x in v.array_value.values]}}
        raise AssertionError(kind)

    def attrs(kvs) -> list[dict]:
        return [{"key": a.key, "value": value(a.value)} for a in kvs]

    def ts(n: int):
        return str(n) if int_as_string else n

    doc = {"resourceSpans": []}
    for rs in req.resource_spans:
        rdoc = {"resource": {"attributes": attrs(rs.resource.attributes)}, "scopeSpans": []}
        for ss in rs.scope_spans:
            sdoc = {"scope": {"name": ss.scope.name}, "spans": []}
            for s in ss.spans:
                span = {
                    "traceId": s.trace_id.hex(),
                    "spanId": s.span_id.hex(),
                    "name": s.name,
                    "kind": s.kind,
                    "startTimeUnixNano": ts(s.start_time_unix_nano),
                    "endTimeUnixNano": ts(s.end_time_unix_nano),
                    "attributes": attrs(s.attributes),
                    "status": {"code": s.status.code, "message": s.status.message},
                    "events": [
                        {"name": e.name, "timeUnixNano": ts(e.time_unix_nano),
                         "attributes": attrs(e.attributes)}
                        for e in s.events
                    ],
                    "someFutureField": {"ignored": True},
                }
                if s.parent_span_id:
                    span["parentSpanId"] = s.parent_span_id.hex()
                sdoc["spans"].append(span)
            rdoc["scopeSpans"].append(sdoc)
        doc["resourceSpans"].append(rdoc)
    return json.dumps(doc).encode()
