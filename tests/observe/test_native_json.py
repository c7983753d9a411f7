"""The native OTLP/JSON path gives exactly the reference's ``Decoded`` (otlp_decode.decode_json): the same rows,
JSON cells byte for byte, scores, rejected counts and messages, and the same refusal for the same bodies.

Bodies come from the protobuf generator of test_native_decode rendered as OTLP/JSON in every form a client
may use, from a generator of awkward JSON values, from the fuzz tests' mutations, and from the real Python
and JS exporters. Each sample also counts which path decoded it, so a differential test cannot pass by
handing everything to the reference.
"""

from __future__ import annotations

import base64
import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest
from daemon_support import get, post, sql
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from otlp_bodies import chat_span, new_ids, request, to_json
from otlp_mutations import mutated_json
from test_native_decode import _common_span, generated_bodies, ld

from lousho.observe.client.workload import WorkloadPlan, emit_runs
from lousho.observe.decode import otlp_decode, otlp_json_native
from lousho.observe.store.span_store import arrow_batch

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


def _outcome(decode, body: bytes) -> str:
    """A decode's whole result as text: the Arrow tables the store would insert (schemas and values; repr tells 1
    from True and -0.0 from 0.0), the rejected count, messages and nulled count; a refusal with its message."""
    try:
        decoded = decode(body)
    except otlp_decode.BadPayload as e:
        return f"BadPayload: {e}"
    batch = arrow_batch(decoded)
    batch.spans.validate(full=True)  # offsets, bitmaps and UTF-8 of the buffers the C module wrote
    batch.scores.validate(full=True)
    return (f"Decoded(rejected={decoded.rejected}, errors={decoded.errors!r}, nulled={decoded.nulled}, "
            f"spans={batch.spans.schema!r} {batch.spans.to_pydict()!r}, "
            f"scores={batch.scores.schema!r} {batch.scores.to_pydict()!r})")


def assert_same(body: bytes) -> str:
    expected = _outcome(otlp_decode.decode_json, body)
    assert _outcome(otlp_json_native.decode_json, body) == expected
    return expected


class _Paths:
    """How many bodies the transcoder took, and how many it handed to the reference, over a block."""

    def __enter__(self) -> _Paths:
        self.before = otlp_json_native.path_counts()
        return self

    def __exit__(self, *exc: object) -> None:
        after = otlp_json_native.path_counts()
        self.native = after["transcoded"] - self.before["transcoded"]
        self.reference = after["reference"] - self.before["reference"]


# --- a protobuf request as OTLP/JSON, in the forms clients write it ---

_ID_KEYS = ("traceId", "spanId", "parentSpanId")
_INT_KEYS = ("intValue", "startTimeUnixNano", "endTimeUnixNano", "timeUnixNano")
_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")


def _hex_ids(part: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        if key in part:
            part[key] = base64.b64decode(part[key]).hex()


def _vary(node: Any, rng: random.Random, snake: bool) -> Any:
    """64-bit integers as strings or numbers, and field names in snake_case now and then (json_format takes
    both names; ids stay camelCase, the only spelling the reference reads as hex)."""
    if isinstance(node, list):
        return [_vary(item, rng, snake) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        value = _vary(value, rng, snake)
        if key in _INT_KEYS and isinstance(value, str) and rng.random() < 0.5:
            value = int(value)
        if snake and key not in _ID_KEYS and rng.random() < 0.3:
            key = _SNAKE.sub("_", key).lower()
        out[key] = value
    return out


def request_as_json(request: ExportTraceServiceRequest, rng: random.Random) -> bytes:
    doc = json_format.MessageToDict(request, use_integers_for_enums=rng.random() < 0.5)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
                if rng.random() < 0.5:
                    span["someFutureField"] = {"ignored": [1, "x", None]}
            if "spans" in ss:
                ss["spans"] = _vary(ss["spans"], rng, snake=rng.random() < 0.3)
    return json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()


@st.composite
def protobuf_bodies_as_json(draw) -> bytes:
    body = draw(generated_bodies())
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError:
        body = ld(1, ld(2, b"".join(ld(2, s) for s in draw(st.lists(_common_span(), min_size=1, max_size=3)))))
        request.ParseFromString(body)
    return request_as_json(request, random.Random(draw(st.integers(0, 2**32))))


@pytest.mark.slow
def test_generated_requests_as_json_decode_the_same():
    """The protobuf generator's requests (values at and past their ranges, rejected spans, both paths of the
    convention columns) written as OTLP/JSON; nearly all of them must go the native way."""

    # 60 bodies: each is large and slow to draw (the generator's whole range); the protobuf tests draw more.
    @given(body=protobuf_bodies_as_json())
    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    def sample(body):
        assert_same(body)

    with _Paths() as paths:
        sample()
    assert paths.native >= 40, (paths.native, paths.reference)


# --- awkward JSON: every representation json_format takes or refuses, for every kind of field; each field
# mostly in a form the transcoder takes, so that one odd value at a time decides a body's outcome ---

# Written into the text in place of these strings: JSON json.dumps does not write.
_RAW = {'"__BIG__"': "1e400", '"__NEG_ZERO__"': "-0", '"__NEG_ZERO_F__"': "-0.0", '"__EXP__"': "1E2"}


def _mostly(good: st.SearchStrategy[Any], *odd: Any) -> st.SearchStrategy[Any]:
    """``good`` 15 times in 16, else one of ``odd`` (values, or strategies)."""
    odd_values = [o if isinstance(o, st.SearchStrategy) else st.just(o) for o in odd]
    return st.one_of(*[good] * (15 * len(odd_values)), *odd_values)


_TEXT = _mostly(st.text(max_size=8) | st.sampled_from(["\U0001f600", "\x00\x1f\"\\/", "é", ""]),
                "\ud800", "a\udfffb", 3, None)
_HEX16 = st.binary(min_size=16, max_size=16).map(bytes.hex)
_HEX8 = st.binary(min_size=8, max_size=8).map(bytes.hex)


def _id(valid: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return _mostly(valid | valid.map(str.upper), st.binary(max_size=17).map(bytes.hex), *ID_ODD)


# Values at the edges of what the transcoder takes, and past them (each also tried alone, below).
U64_ODD = (2**63, 2**64 - 1, str(2**64 - 1), 2**64, -1, "-1", "-0", "__NEG_ZERO__", "1e3", "__EXP__", 1.0, 2.5, True,
           " 5", "+5", "007", "", "x", None)
U32_ODD = (2**32 - 1, 2**32, -1, "-0", 1.0, None, "x")
INT64_ODD = (2**63 - 1, -(2**63), str(-(2**63)), 2**63, -(2**63) - 1, str(2**64), "1.0", 1.5, 3.0, "1e2", "0x10", " 7",
             "-", True, None, "", "\u0663", "__NEG_ZERO__", "__EXP__", "-0", "007")
DOUBLE_ODD = (math.nan, math.inf, "nan", "inf", "1.5", "", True, None, "__BIG__", "__NEG_ZERO__", "__NEG_ZERO_F__",
              "__EXP__", 2**53, 2**53 + 1, -(2**60), "NaN", "Infinity", "-Infinity", -0.0, 5e-324, 1e308)
BYTES_ODD = (5, None, "QQ=x", "A", "QQ", "QQ=", "QQ==", "QQ===", "QUI", "QUI=", "QUI==", "Q Q", "QUJD=", "-_+/", "QR==",
             "")
ID_ODD = ("", "0", "abc", "zz" * 8, "00" * 16, "00" * 8, " 0102", None, 5, "AQID", "AB" * 16, "ab" * 15, "ab" * 17)
KIND_ODD = ("SPAN_KIND_BOGUS", "3", -1, 7, 2**31, -(2**31), 1.0, None, True, "__NEG_ZERO__", "SPAN_KIND_CONSUMER")

_U64 = _mostly(st.integers(0, 2**63 - 1) | st.integers(0, 2**64 - 1).map(str), *U64_ODD)
_U32 = _mostly(st.integers(0, 5) | st.just("3"), *U32_ODD)
_INT64 = _mostly(st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**63), 2**63 - 1).map(str), *INT64_ODD)
_DOUBLE = _mostly(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53)
                  | st.sampled_from(["NaN", "Infinity", "-Infinity", -0.0, 0, 5e-324, 1e308]), st.floats(), *DOUBLE_ODD)
_BYTES = _mostly(st.binary(max_size=9).map(lambda b: base64.b64encode(b).decode())
                 | st.binary(max_size=9).map(lambda b: base64.urlsafe_b64encode(b).decode().rstrip("=")),
                 st.text("ABCab01+/-_=", max_size=7), *BYTES_ODD)


def _scalar() -> st.SearchStrategy[Any]:
    return _mostly(
        st.one_of(_TEXT.map(lambda s: {"stringValue": s}),
                  _mostly(st.booleans(), "true", 1, None).map(lambda b: {"boolValue": b}),
                  _INT64.map(lambda n: {"intValue": n}), _DOUBLE.map(lambda x: {"doubleValue": x}),
                  _BYTES.map(lambda b: {"bytesValue": b}), st.just({}),
                  st.sampled_from([{"string_value": "snake"}, {"int_value": "3"}, {"stringValueStrindex": 3},
                                   {"future": 1, "boolValue": False}])),
        {"stringValue": "a", "intValue": 1}, {"stringValue": "a", "string_value": "b"}, {"stringValue": None},
        {"stringValueStrindex": 2**31}, {"[ext]": 1}, "notanobject", None)


def _kv(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    key = st.sampled_from(["gen_ai.operation.name", "gen_ai.request.model", "gen_ai.usage.input_tokens",
                           "lousho.run.id", "lousho.cost.usd", "gen_ai.evaluation.score.value",
                           "gen_ai.evaluation.score.label", "k", ""]) | _TEXT
    return _mostly(st.builds(lambda k, v: {"key": k, "value": v}, key, value), key.map(lambda k: {"key": k}),
                   value.map(lambda v: {"value": v}),
                   st.builds(lambda k, v: {"key": k, "value": v, "keyStrindex": 1}, key, value), None, 3,
                   key.map(lambda k: {"key": k, "value": None}))


_ANY = st.recursive(_scalar(), lambda inner: _mostly(
    st.lists(inner, max_size=3).map(lambda vs: {"arrayValue": {"values": vs}})
    | st.lists(_kv(inner), max_size=3).map(lambda kvs: {"kvlistValue": {"values": kvs}})
    | st.sampled_from([{"arrayValue": {}}, {"kvlistValue": {}}]),
    {"arrayValue": {"values": None}}, {"kvlistValue": []}, {"arrayValue": {"values": [None]}}), max_leaves=5)
_ATTRS = _mostly(st.lists(_kv(_ANY), max_size=4), None, {}, "x")
_KIND = _mostly(st.integers(0, 6) | st.sampled_from(["SPAN_KIND_SERVER", "SPAN_KIND_CLIENT"]), *KIND_ODD)
_STATUS = _mostly(st.fixed_dictionaries({}, optional={
    "code": _mostly(st.integers(0, 3) | st.sampled_from(["STATUS_CODE_ERROR", "STATUS_CODE_OK"]), "ERROR", None),
    "message": _TEXT, "future": st.just(1)}), None, {"deprecatedCode": 1})
_EVENT = st.fixed_dictionaries({"name": st.sampled_from(["gen_ai.evaluation.result", "exception", "x"])}, optional={
    "timeUnixNano": _U64, "attributes": _ATTRS, "droppedAttributesCount": _U32,
    "time_unix_nano": _mostly(st.nothing(), 5)})
_LINK = st.fixed_dictionaries({"traceId": _id(_HEX16), "spanId": _id(_HEX8)}, optional={
    "attributes": _ATTRS, "traceState": _TEXT, "flags": _U32, "trace_id": _mostly(st.nothing(), "AQID")})
_SPAN = _mostly(st.fixed_dictionaries({"traceId": _id(_HEX16), "spanId": _id(_HEX8)}, optional={
    "parentSpanId": _id(_HEX8), "name": _TEXT | st.sampled_from(["chat gpt-4o", "invoke_agent a"]),
    "kind": _KIND, "startTimeUnixNano": _U64, "endTimeUnixNano": _U64, "end_time_unix_nano": _mostly(st.nothing(), 5),
    "attributes": _ATTRS, "events": _mostly(st.lists(_EVENT, max_size=2), None),
    "links": _mostly(st.lists(_LINK, max_size=2), {}), "status": _STATUS, "droppedAttributesCount": _U32,
    "flags": _U32, "traceState": _TEXT, "future": st.just({"x": [1, None]}),
    "trace_id": _mostly(st.nothing(), "AQIDBAUGBwgJCgsMDQ4PEA==")}), 3, None)
_RESOURCE = _mostly(st.fixed_dictionaries({}, optional={
    "attributes": _ATTRS, "droppedAttributesCount": _U32,
    "entityRefs": _mostly(st.just([{"type": "host", "idKeys": ["host.name"]}]), [{"idKeys": [None]}])}),
    None, [])
_SCOPE = _mostly(st.fixed_dictionaries({}, optional={"name": _TEXT, "version": _TEXT, "attributes": _ATTRS}), None)


@st.composite
def awkward_bodies(draw) -> bytes:
    scope_spans = st.fixed_dictionaries({"spans": _mostly(st.lists(_SPAN, max_size=3), None, {}, [])},
                                        optional={"scope": _SCOPE, "schemaUrl": st.just(5)})
    resource_spans = st.fixed_dictionaries({"scopeSpans": st.lists(scope_spans, min_size=1, max_size=2)},
                                           optional={"resource": _RESOURCE, "schemaUrl": st.just(None)})
    doc = {"resourceSpans": draw(st.lists(resource_spans, min_size=1, max_size=2))}
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    for marker, raw in _RAW.items():
        text = text.replace(marker, raw)
    # A key twice in one object: json.loads keeps the last.
    if draw(st.integers(0, 15)) == 0:
        text = text.replace('"name": ', '"name": "first", "name": ', 1)
    return text.encode("utf-8", "surrogatepass")


@pytest.mark.slow
def test_awkward_json_values_decode_or_fail_the_same():
    """Ids in upper case, of the wrong length or not hex; integers as numbers, strings, floats and out of
    range; enums by name and number; NaN and infinities; base64 in both alphabets; snake_case names, nulls,
    unknown keys, lone surrogates, duplicate keys: the same rows, rejections and refusals as the reference."""
    seen: set[str] = set()

    @given(body=awkward_bodies())
    @settings(max_examples=700, deadline=None, derandomize=True, database=None)
    def sample(body):
        outcome = assert_same(body)
        seen.add("refused" if outcome.startswith("BadPayload") else "rejected" if "rejected=0" not in outcome
                 else "decoded")

    with _Paths() as paths:
        sample()
    assert seen == {"refused", "rejected", "decoded"}
    assert paths.native >= 160 and paths.reference >= 110, (paths.native, paths.reference)


def _body(span: dict[str, Any]) -> bytes:
    text = json.dumps({"resourceSpans": [{"resource": {"attributes": [{"key": "service.name",
                                                                        "value": {"stringValue": "s"}}]},
                                          "scopeSpans": [{"scope": {"name": "sc"}, "spans": [span]}]}]})
    for marker, raw in _RAW.items():
        text = text.replace(marker, raw)
    return text.encode("utf-8", "surrogatepass")


def _span(**fields: Any) -> dict[str, Any]:
    """A span every field of which the transcoder takes, with ``fields`` replacing or adding some."""
    span = {"traceId": "0102030405060708090a0b0c0d0e0f10", "spanId": "0102030405060708", "name": "chat gpt-4o",
            "kind": 3, "startTimeUnixNano": "1780000000000000000", "endTimeUnixNano": 1780000000000000001,
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                           {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}}],
            "events": [{"name": "gen_ai.evaluation.result", "timeUnixNano": "5", "attributes": [
                {"key": "gen_ai.evaluation.score.value", "value": {"doubleValue": 0.5}}]}],
            "links": [{"traceId": "0102030405060708090a0b0c0d0e0f11", "spanId": "0102030405060709"}],
            "status": {"code": 2, "message": "boom"}}
    span.update(fields)
    return span


def _value(**value: Any) -> dict[str, Any]:
    return _span(attributes=[{"key": "gen_ai.usage.output_tokens", "value": value},
                             {"key": "lousho.cost.usd", "value": value}])


_ONE_ODD = [
    *[_span(startTimeUnixNano=v) for v in U64_ODD],
    *[_span(events=[{"name": "e", "timeUnixNano": v}]) for v in U64_ODD],
    *[_span(droppedAttributesCount=v) for v in U32_ODD], *[_span(flags=v) for v in U32_ODD],
    *[_value(intValue=v) for v in INT64_ODD], *[_value(doubleValue=v) for v in DOUBLE_ODD],
    *[_value(bytesValue=v) for v in BYTES_ODD], *[_span(kind=v) for v in KIND_ODD],
    *[_span(status={"code": v}) for v in (*KIND_ODD, "STATUS_CODE_ERROR", "STATUS_CODE_BOGUS")],
    *[_span(traceId=v) for v in ID_ODD], *[_span(spanId=v) for v in ID_ODD], *[_span(parentSpanId=v) for v in ID_ODD],
    *[_span(links=[{"traceId": v, "spanId": "01" * 8}]) for v in ID_ODD],
    *[_value(boolValue=v) for v in (True, False, "true", 1, None)],
    *[_value(stringValue=v) for v in ("", "\ud800", "\udc00x", "\U0001f600", "\x00", 3, None)],
    *[_value(**{k: v}) for k, v in [("stringValueStrindex", 3), ("stringValueStrindex", 2**31), ("int_value", "4"),
                                    ("arrayValue", {}), ("kvlistValue", {}), ("arrayValue", {"values": None})]],
    _value(stringValue="a", intValue=1), _value(), _span(name=3), _span(name=None), _span(events=None),
    _span(trace_id="AQIDBAUGBwgJCgsMDQ4PEA=="), _span(start_time_unix_nano="7"), _span(links={}), _span(attributes={}),
    _span(attributes=[{"key": "k", "value": {"stringValue": "v"}, "keyStrindex": 2}]), _span(status=None),
    _span(**{"[x]": 1}), _span(future={"a": [1, None, {"b": "\ud800"}]}),
    # a lone surrogate as a key or an enum name, which ParseDict's lookup fails on with a SystemError
    _span(**{"\ud800": 1}), _span(future={"\udc00": 1}), _span(events=[{"name": "e", "\ud800": 1}]),
    _span(links=[{"traceId": "01" * 16, "spanId": "01" * 8, "\ud800": 1}]), _span(status={"code": 2, "\ud800": 1}),
    _span(attributes=[{"key": "k", "value": {"stringValue": "v"}, "\ud800": 1}]), _value(**{"\ud800": 1}),
    _value(kvlistValue={"values": [{"key": "k", "value": {"\udfff": 1}}]}), _span(kind="\ud800"),
    _span(status={"code": "\ud800"}), _value(doubleValue="\ud800"), _value(bytesValue="\ud800"),
]


@pytest.mark.parametrize("span", _ONE_ODD, ids=range(len(_ONE_ODD)))
def test_one_odd_value_at_a_time_decodes_or_fails_the_same(span):
    """Each odd value of the generators above alone in a span the transcoder takes: where it decides alone."""
    assert_same(_body(span))


def test_the_plain_span_of_the_table_goes_the_native_way():
    with _Paths() as paths:
        assert "rejected=0" in assert_same(_body(_span()))
    assert paths.native == 1


@pytest.mark.slow
@given(body=mutated_json())
@settings(max_examples=200, deadline=None, derandomize=True)
def test_mutated_json_bodies_decode_or_fail_the_same(body):
    assert_same(body)


@pytest.mark.parametrize("body", [
    b"", b"[]", b"null", b"{", b'{"resourceSpans": 3}', b'{"resourceLogs": []}', b'{"resourceSpans": [3]}',
    b'\xef\xbb\xbf{"resourceSpans": []}', b'{"resourceSpans": []} x', b'{"resourceSpans": [{"scopeSpans": 3}]}',
    b'{"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": {"intValue": "x"}}]}}]}',
    b'{"resourceSpans": [{"scopeSpans": [{"spans": "x"}]}]}', b'\xff',
    '{"a": "\ud800"}'.encode("utf-8", "surrogatepass"),
    b'{"resourceSpans": [{"scopeSpans": [{"spans": []}]}]}', b' {"resourceSpans": null} ', b"{}",
], ids=["empty", "array", "null", "truncated", "not-array", "logs", "not-object", "bom", "trailing", "scopes",
        "resource-int", "spans", "utf8", "surrogate", "no-spans", "null-spans", "empty-object"])
def test_bodies_that_are_not_a_trace_request_are_refused_by_both_or_empty(body):
    assert assert_same(body).startswith(("BadPayload", "Decoded("))


def test_a_value_nested_past_the_transcoders_depth_goes_to_the_reference():
    with _Paths() as paths:
        for depth in range(20, 30):
            value: dict[str, Any] = {"boolValue": True}
            for _ in range(depth):
                value = {"arrayValue": {"values": [value]}}
            span = {"traceId": "01" * 16, "spanId": "02" * 8, "attributes": [{"key": "k", "value": value}]}
            body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
            assert f"{'[' * depth}true{']' * depth}" in assert_same(body)  # the value is kept, not rejected
    assert paths.native >= 2 and paths.reference >= 2, (paths.native, paths.reference)


_SERVICE = {"key": "service.name", "value": {"stringValue": "s"}}


@pytest.mark.parametrize("part", [
    {"resource": {"\ud800": 1}}, {"resource": {"attributes": [_SERVICE, {"key": "k", "value": {"\ud800": 1}}]}},
    {"resource": {"attributes": [{**_SERVICE, "\udc00": 1}]}}, {"scope": {"name": "sc", "\ud800": 1}},
    {"scope": {"attributes": [{"key": "k", "value": {"intValue": "\ud800"}}]}},
], ids=["resource", "resource-value", "resource-attribute", "scope", "scope-int"])
def test_a_lone_surrogate_in_the_resource_or_scope_refuses_the_body_in_both(part):
    doc = json.loads(_body(_span()))
    rs = doc["resourceSpans"][0]
    if "resource" in part:
        rs["resource"] = part["resource"]
    else:
        rs["scopeSpans"][0]["scope"] = part["scope"]
    assert assert_same(json.dumps(doc).encode()).endswith("is not valid Unicode (a lone surrogate)")


def _nested_to(depth: int) -> bytes:
    """The plain span with an unknown field (7 levels down, which both decoders pass over) nesting to ``depth``."""
    inner = depth - 7
    return _body(_span(future="NESTED")).replace(b'"NESTED"', b"[" * (inner - 1) + b"{}" + b"]" * (inner - 1))


def test_a_body_nested_past_the_limit_is_refused_by_both_and_one_at_it_is_not():
    limit = otlp_decode.MAX_JSON_DEPTH
    with _Paths() as paths:
        assert "rejected=0" in assert_same(_nested_to(limit))
    assert paths.native == 1  # the transcoder passes over a value as deep as the limit allows
    for depth in (limit + 1, 1000, 100_000):
        assert assert_same(_nested_to(depth)) == f"BadPayload: the body nests arrays and objects more than {limit} deep"
    value: dict[str, Any] = {"boolValue": True}
    for _ in range(40):  # 10 + 3 levels each: an attribute value of AnyValues nested past the limit
        value = {"arrayValue": {"values": [value]}}
    assert assert_same(_body(_span(attributes=[{"key": "k", "value": value}]))).startswith("BadPayload: the body nests")


def test_the_fuzz_seed_and_hand_written_json_decode_the_same_the_native_way():
    trace_id, span_id = new_ids()
    req = request([chat_span(trace_id, span_id, **{"lousho.run.id": "r", "gen_ai.usage.input_tokens": 7})])
    with _Paths() as paths:
        for as_string in (True, False):
            assert assert_same(to_json(req, int_as_string=as_string)).startswith("Decoded(")
    assert paths.native == 2


class _Capture(SpanExporter):
    """Keeps the SDK's own OTLP encoding of each batch, written as OTLP/JSON: json_format's mapping with the
    ids in hex, as the OTLP/JSON encoding specifies."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def export(self, spans) -> SpanExportResult:
        self.bodies.append(request_as_json(encode_spans(spans), random.Random(len(self.bodies))))
        return SpanExportResult.SUCCESS


def test_bodies_of_the_python_sdk_decode_the_same_the_native_way():
    capture = _Capture()
    provider = TracerProvider(resource=Resource.create({"service.name": "diff", "deployment": "t\u00e9st"}))
    provider.add_span_processor(SimpleSpanProcessor(capture))
    emit_runs(provider, WorkloadPlan(runs=20, fail_rate=0.4, error_rate=0.2))
    tracer = provider.get_tracer("diff")
    with tracer.start_as_current_span("work", attributes={"n": 1.5, "xs": (1, 2), "flag": True,
                                                          "nan": math.nan}) as span:
        span.add_event("exception", {"exception.type": "ValueError", "exception.message": "boom\n"})
        span.add_link(span.get_span_context(), {"why": "self"})
    provider.shutdown()
    with _Paths() as paths:
        outcomes = [assert_same(body) for body in capture.bodies]
    assert paths.native == len(capture.bodies) > 60 and paths.reference == 0
    assert all(outcome.startswith("Decoded(") and "rejected=0" in outcome for outcome in outcomes)
    assert any("gen_ai.evaluation.result" in outcome for outcome in outcomes)


def test_bodies_of_the_js_sdk_json_exporter_decode_the_same_the_native_way():
    """Bodies the JS SDK's OTLP/HTTP exporter sent in its default JSON mode
    (`node fixtures/make_js_otlp_body.mjs json`)."""
    bodies = (FIXTURES / "js-otlp-json.jsonl").read_bytes().splitlines()
    with _Paths() as paths:
        outcomes = [assert_same(body) for body in bodies]
    assert len(bodies) == 3 and paths.native == 3 and paths.reference == 0
    assert all("rejected=0" in outcome for outcome in outcomes)
    decoded = [otlp_json_native.decode_json(body) for body in bodies]
    assert sum(d.span_count for d in decoded) == 3 and sum(len(d.scores["seq"]) for d in decoded) == 1


def test_the_native_json_path_is_built():
    assert otlp_json_native.AVAILABLE and otlp_json_native.NAME == "native"


@pytest.mark.system
def test_a_json_body_is_stored_by_the_native_path_and_the_daemon_says_so(daemon):
    assert any("json_decoder=native" in line for line in daemon.output[:3]), daemon.output[:3]
    assert 'lousho_json_decoder_info{decoder="native"} 1' in get(daemon.url, "/metrics").body.decode()
    body = (FIXTURES / "js-otlp-json.jsonl").read_bytes().splitlines()[0]
    reply = post(daemon.url, "/v1/traces", body, "application/json")
    assert reply.status == 200, reply.body
    span_id = json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"]
    rows = sql(daemon.url, "SELECT span_id, service_name, input_tokens FROM spans")
    assert rows == [{"span_id": span_id, "service_name": "js-agent", "input_tokens": 1200}]
