"""The native decoder gives exactly the reference decoder's rows (otlp_decode.decode_protobuf): the same Arrow
tables the store inserts (schema and values, JSON cells byte for byte, scores), rejected counts and messages,
and refuses the same bodies."""

from __future__ import annotations

import base64
import itertools
import math
import struct
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from daemon_support import get, post, sql
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from otlp_mutations import PROTO, mutated_bytes

from lousho.observe.client.workload import WorkloadPlan, emit_runs
from lousho.observe.decode import otlp_decode, otlp_native
from lousho.observe.store.span_store import arrow_batch

FIXTURES = Path(__file__).parent / "fixtures"
_settings = settings(max_examples=250, deadline=None, derandomize=True)


def rows(decoded: otlp_decode.Decoded) -> tuple[dict, dict]:
    """The span and score rows the store would insert for ``decoded``, by column."""
    batch = arrow_batch(decoded)
    return batch.spans.to_pydict(), batch.scores.to_pydict()


def _outcome(decode, body: bytes) -> str:
    """A decode's whole result as text: the Arrow tables' schemas and values (repr tells 1 from True and -0.0
    from 0.0, and NaN equals NaN), the rejected count, messages and nulled count."""
    try:
        decoded = decode(body)
    except otlp_decode.BadPayload:
        return "BadPayload"
    batch = arrow_batch(decoded)
    batch.spans.validate(full=True)  # offsets, bitmaps and UTF-8 of the buffers the C module wrote
    batch.scores.validate(full=True)
    batch.resources.validate(full=True)
    return repr((batch.spans.schema, batch.spans.to_pydict(), batch.scores.schema, batch.scores.to_pydict(),
                 batch.resources.to_pydict(), decoded.rejected, decoded.errors, decoded.nulled))


def assert_same(body: bytes) -> str:
    expected = _outcome(otlp_decode.decode_protobuf, body)
    got = _outcome(otlp_native.decode_protobuf, body)
    if got != expected and "BadPayload" not in (got, expected):
        (ref, ref_scores), (native, native_scores) = rows(otlp_decode.decode_protobuf(body)), rows(
            otlp_native.decode_protobuf(body))
        diff = {c: (ref[c], native[c]) for c in ref if repr(ref[c]) != repr(native[c])}
        raise AssertionError(f"columns differ: {diff}; scores equal: {ref_scores == native_scores}")
    assert got == expected
    return expected


# --- protobuf wire encoding by hand, so a body can hold what the protobuf API never writes (a message field
# twice, unknown fields and groups, wrong wire types, invalid UTF-8) ---

def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def ld(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def vi(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def f64(number: int, value: int) -> bytes:
    return varint(number << 3 | 1) + (value & (1 << 64) - 1).to_bytes(8, "little")


def f64d(number: int, value: float) -> bytes:
    return varint(number << 3 | 1) + struct.pack("<d", value)


# Keys the conventions read (so both the Python and the native paths of a span are taken), and others.
_KEYS = st.sampled_from([
    "gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.provider.name", "gen_ai.request.model",
    "gen_ai.response.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "lousho.run.id",
    "lousho.cost.usd", "lousho.probe", "session.id", "gen_ai.conversation.id", "llm.invocation_parameters",
    "gen_ai.usage.cache_read.input_tokens", "gen_ai.input.messages", "gen_ai.output.messages", "input.value",
    "openinference.span.kind", "traceloop.span.kind", "traceloop.entity.name", "error.type", "service.name",
    "gen_ai.evaluation.score.label", "gen_ai.evaluation.score.value", "gen_ai.evaluation.name",
    "lousho.check.failed", "exception.type", "plain.key", "http.method", "k", "",
]) | st.text(max_size=6)
_TEXT = st.text(max_size=12) | st.sampled_from([
    "chat", "invoke_agent", "AGENT", "LLM", "workflow", "pass", "fail", "12", " 7 ", "1.5", "true", "gpt-4o",
    "openai", '"quoted"', '[{"role":"user","content":"hi"}]', '{"model":"gpt-4o"}',
    '{"messages":[{"role":"assistant","content":"ok"}]}', "\u00e9\U0001f600\x00\x7f\n\"\\",
])
_INT = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, -1, 2**53, 120, 30])
_FLOAT = st.sampled_from([math.nan, math.nan, math.nan, math.inf, -math.inf, 0.0, -0.0, 1e16, 5e-324, 0.1,
                          3.0]) | st.floats()


_TEXT_BYTES = _TEXT.map(str.encode)
# Not UTF-8: the whole body is refused.
_BAD_TEXT = st.sampled_from([b"\xff", b"a\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"])


def _scalar() -> st.SearchStrategy[bytes]:
    return st.one_of(
        _TEXT_BYTES.map(lambda s: ld(1, s)),
        st.booleans().map(lambda b: vi(2, int(b))),
        _INT.map(lambda n: vi(3, n)),
        _FLOAT.map(lambda x: f64d(4, x)),
        st.binary(max_size=7).map(lambda b: ld(7, b)),
        st.just(b""),  # no value at all
        st.just(vi(8, 3)),  # string_value_strindex
    )


def _any_value() -> st.SearchStrategy[bytes]:
    return st.recursive(
        _scalar(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda vs: ld(5, b"".join(ld(1, v) for v in vs))),
            st.lists(st.tuples(_KEYS, inner), max_size=3).map(
                lambda kvs: ld(6, b"".join(ld(1, ld(1, k.encode()) + ld(2, v)) for k, v in kvs))),
            # Two encodings of one AnyValue: merged, the last oneof member wins.
            st.tuples(inner, inner).map(lambda pair: pair[0] + pair[1]),
        ),
        max_leaves=6,
    )


def _kv(number: int, key: str, value: bytes) -> bytes:
    return ld(number, ld(1, key.encode()) + ld(2, value))


# A model call as instrumentations send it: priced from the table when the model is known.
_CALL = st.tuples(st.sampled_from(["openai", "anthropic", "x"]), st.sampled_from(["gpt-4o", "claude-3-5-sonnet", "m"]),
                  st.integers(0, 5000), st.integers(0, 500)).map(
    lambda t: _kv(9, "gen_ai.provider.name", ld(1, t[0].encode()))
    + _kv(9, "gen_ai.request.model", ld(1, t[1].encode()))
    + _kv(9, "gen_ai.usage.input_tokens", vi(3, t[2])) + _kv(9, "gen_ai.usage.output_tokens", vi(3, t[3])))


# Keys the decoder maps itself (aliases of promoted columns), and keys nobody reads.
_PLAIN_KEYS = st.sampled_from([
    "gen_ai.operation.name", "gen_ai.agent.name", "agent.name", "gen_ai.provider.name", "gen_ai.system",
    "gen_ai.request.model", "llm.model_name", "gen_ai.response.model", "gen_ai.tool.name", "session.id",
    "gen_ai.conversation.id", "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt",
    "gen_ai.usage.output_tokens", "lousho.cost.usd", "gen_ai.usage.cost", "error.type", "lousho.run.id",
    "lousho.case.id", "lousho.probe", "plain.key", "http.method", "", "gen_ai.input.messages",
    "gen_ai.output.messages", "lousho.run.id",
])


def _value_field(value: bytes, present: bool, split: int | None) -> bytes:
    """KeyValue.value: absent, whole, or cut in two occurrences at ``split`` (each must be whole on its own,
    as protobuf parses them: a cut inside a field is refused, even though the two concatenated would read)."""
    if not (present or value):
        return b""
    if split is None:
        return ld(2, value)
    cut = split % (len(value) + 1)
    return ld(2, value[:cut]) + ld(2, value[cut:])


def _attributes(number: int) -> st.SearchStrategy[bytes]:
    # Rarely (a truncated cut refuses the whole body, and a body holds many values): cut at 0 (an empty
    # occurrence, then the whole), or 1 or 2 bytes in (mostly a truncated field).
    splits = st.sampled_from(range(400)).map(lambda i: i if i < 3 else None)
    key_value = st.tuples(_KEYS, _any_value(), st.booleans(), splits).map(
        lambda t: ld(number, ld(1, t[0].encode()) + _value_field(t[1], t[2], t[3])))
    listed = st.lists(key_value, max_size=5).map(b"".join)
    if number != 9:
        return listed
    plain = st.lists(st.tuples(_PLAIN_KEYS, _scalar()), max_size=6).map(
        lambda kvs: b"".join(_kv(9, k, v) for k, v in kvs))
    return st.one_of(listed, plain, st.tuples(plain, _CALL).map(b"".join), st.tuples(_CALL, plain).map(b"".join))


def _id(size: int) -> st.SearchStrategy[bytes]:
    """Mostly a valid id; sometimes all zero or of the wrong length (the span is rejected)."""
    valid = st.binary(min_size=size, max_size=size).filter(any)
    return st.one_of(*[valid] * 12, st.just(bytes(size)), st.binary(max_size=size + 1))


_VALID_TIME = st.sampled_from([1_780_000_000_000_000_000, 2**63 - 1, 0]) | st.integers(0, 2**63 - 1)
_TIME = st.one_of(*[_VALID_TIME] * 7, st.integers(0, 2**64 - 1))
_UNKNOWN = st.sampled_from([b"", vi(99, 5), ld(98, b"\x08\x01"), varint(97 << 3 | 3) + vi(1, 1) + varint(97 << 3 | 4),
                            f64(96, 1), varint(95 << 3 | 5) + b"\x00\x00\x00\x01",
                            varint(97 << 3 | 3) + vi(0, 1) + varint(97 << 3 | 4)])  # field 0 in a group


# Attributes of evaluation and exception events, including the values the score row coerces.
_SCORE_ATTRS = st.sampled_from([
    b"", _kv(3, "gen_ai.evaluation.score.label", ld(1, b"pass")),
    _kv(3, "gen_ai.evaluation.score.label", ld(1, b"FAILED")),
    _kv(3, "gen_ai.evaluation.score.label", ld(1, "O\u212a".encode())),  # lower() is "ok"
    _kv(3, "gen_ai.evaluation.score.value", f64d(4, 0.5)), _kv(3, "gen_ai.evaluation.score.value", vi(3, 1)),
    _kv(3, "gen_ai.evaluation.score.value", vi(2, 1)), _kv(3, "gen_ai.evaluation.name", vi(3, 7)),
    _kv(3, "lousho.check.failed", ld(1, b"")), _kv(3, "lousho.check.failed", vi(3, 0)),
    _kv(3, "lousho.check.failed", ld(1, b"test_x")), _kv(3, "error.type", f64d(4, 1.5)),
    _kv(3, "exception.type", ld(1, b"ValueError")), _kv(3, "exception.type", ld(1, b"")),
    _kv(3, "exception.type", vi(3, 3)),
])
_EVENT_NAMES = st.sampled_from(["gen_ai.evaluation.result", "gen_ai.evaluation.result", "exception",
                                "gen_ai.client.inference.operation.details", "x"])


@st.composite
def _span(draw) -> bytes:
    parts = [ld(1, draw(_id(16))), ld(2, draw(_id(8)))]
    if draw(st.booleans()):
        parts.append(ld(4, draw(st.sampled_from([b"", b"\x01" * 8]) | _id(8))))
    name = draw(st.sampled_from(["chat gpt", "invoke_agent coder", "invoke_agent", "execute_tool x", "chat",
                                 "embeddings", "work", "", "invoke_agent  "]) | _TEXT)
    parts.append(ld(5, name.encode()))
    parts.append(vi(6, draw(st.integers(-(2**31), 2**31 - 1) | st.integers(0, 6))))
    parts += [f64(7, draw(_TIME)), f64(8, draw(_TIME))]
    parts.append(draw(_attributes(9)))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        event_name = draw(_EVENT_NAMES)
        score = draw(_SCORE_ATTRS)
        parts.append(ld(11, f64(1, draw(_TIME)) + ld(2, event_name.encode()) + score + draw(_attributes(3))))
    for _ in range(draw(st.integers(0, 2))):
        parts.append(ld(13, ld(1, draw(_id(16))) + ld(2, draw(_id(8))) + ld(3, b"ts") + draw(_attributes(4))))
    if draw(st.booleans()):
        parts.append(ld(15, ld(2, draw(_TEXT).encode()) + vi(3, draw(st.integers(-3, 4)))))
    parts.append(draw(_UNKNOWN))
    return b"".join(draw(st.permutations(parts)))


@st.composite
def _common_span(draw) -> bytes:
    """A valid span of the keys the native decoder maps itself, with or without a run id and events."""
    parts = [ld(1, draw(st.binary(min_size=16, max_size=16).filter(any))),
             ld(2, draw(st.binary(min_size=8, max_size=8).filter(any))),
             ld(5, draw(st.sampled_from(["chat gpt", "invoke_agent coder", "execute_tool x", "work"])).encode()),
             f64(7, 1_780_000_000_000_000_000), f64(8, 1_780_000_000_000_000_001)]
    plain = st.lists(st.tuples(_PLAIN_KEYS, _scalar()), max_size=5).map(
        lambda kvs: b"".join(_kv(9, k, v) for k, v in kvs))
    parts.append(draw(st.one_of(plain, st.tuples(plain, _CALL).map(b"".join))))
    if draw(st.booleans()):
        parts.append(_kv(9, "lousho.run.id", ld(1, b"run-1")))
    for _ in range(draw(st.sampled_from([0, 1, 2]))):
        parts.append(ld(11, f64(1, 5) + ld(2, draw(_EVENT_NAMES).encode()) + draw(_SCORE_ATTRS) + draw(_SCORE_ATTRS)))
    return b"".join(draw(st.permutations(parts)))


@st.composite
def generated_bodies(draw) -> bytes:
    """Requests of resources, scopes and spans with values at and past their ranges. A message field seen
    twice is merged (two encodings of one span, one resource, one status), as protobuf parsers do."""
    body = b""
    for _ in range(draw(st.integers(1, 2))):
        resource = ld(3, ld(2, b"host")) if draw(st.booleans()) else b""
        resource = ld(1, draw(_attributes(1)) + resource)
        if draw(st.booleans()):
            resource += ld(1, draw(_attributes(1)))
        scopes = b""
        for _ in range(draw(st.integers(1, 2))):
            name = draw(_BAD_TEXT) if draw(st.integers(0, 7)) == 0 else draw(_TEXT_BYTES)
            scope = ld(1, ld(1, name) + ld(2, b"1.0") + draw(_attributes(3)))
            spans = b"".join(ld(2, draw(_span()) + (draw(_span()) if draw(st.integers(0, 4)) == 0 else b""))
                             for _ in range(draw(st.sampled_from([1, 2, 3, 0]))))
            scopes += ld(2, scope + spans + ld(3, b"https://schema"))
        body += ld(1, resource + scopes + draw(_UNKNOWN))
    return body


@pytest.mark.slow
def test_spans_whose_conventions_the_native_decoder_computes_decode_the_same():
    """Chat, tool and agent spans with scores and exceptions, priced calls among them: the common case, which
    the native decoder handles without the Python step; the sample must have gone that way."""

    scores = []

    @given(spans=st.lists(_common_span(), min_size=1, max_size=4))
    @settings(max_examples=150, deadline=None, derandomize=True, database=None)
    def sample(spans):
        body = ld(1, ld(1, _kv(1, "service.name", ld(1, b"svc"))) + ld(2, b"".join(ld(2, span) for span in spans)))
        assert assert_same(body) != "BadPayload"
        scores.append(len(rows(otlp_native.decode_protobuf(body))[1]["seq"]))

    before = otlp_native.path_counts()
    sample()
    after = otlp_native.path_counts()
    assert after["native"] - before["native"] >= 100 and after["native_priced"] > before["native_priced"]
    assert sum(scores) >= 20


@pytest.mark.slow
@given(body=mutated_bytes())
@_settings
def test_mutated_bodies_decode_or_fail_the_same(body):
    assert_same(body)


@pytest.mark.slow
def test_generated_bodies_decode_the_same():
    """Identical results on every generated body; and the sample covers what the generator is for: refused
    bodies, rejected spans, spans with no operation, and both paths of the convention columns."""
    seen: set[str] = set()

    @given(body=generated_bodies())
    @settings(max_examples=100, deadline=None, derandomize=True, database=None)
    def sample(body):
        outcome = assert_same(body)
        if outcome == "BadPayload":
            seen.add("refused")
            return
        decoded = otlp_native.decode_protobuf(body)
        spans, scores = rows(decoded)
        if decoded.rejected:
            seen.add("rejected")
        if scores["seq"]:
            seen.add("scores")
        if any(c is not None and "NaN" in c for c in spans["attributes"]):
            seen.add("nan")
        if any(v is not None for v in spans["cost_usd"]):
            seen.add("cost")
        if any(v is None for v in spans["operation"]) and decoded.span_count:
            seen.add("plain")

    before = otlp_native.path_counts()
    sample()
    after = otlp_native.path_counts()
    assert seen >= {"refused", "rejected", "plain"}
    # Both paths of the convention columns were compared.
    assert all(after[path] - before[path] >= 10 for path in ("native", "python")), (before, after)


@pytest.mark.parametrize("body", [
    b"\xff", b"\x0a\x05\x12", ld(1, ld(2, ld(2, ld(5, b"\xff\xfe")))),  # truncated; a name not UTF-8
    ld(1, ld(2, ld(2, varint(9 << 3 | 4)))),  # a stray end-group tag
    ld(1, ld(2, ld(2, ld(9, ld(1, b"\xed\xa0\x80"))))),  # a surrogate in a key
    varint(0) + b"\x00", varint(1 << 3 | 7),  # field number 0; wire type 7
], ids=["byte", "truncated", "name-utf8", "end-group", "surrogate-key", "field-0", "wire-type-7"])
def test_malformed_bodies_are_refused_by_both(body):
    assert assert_same(body) == "BadPayload"


def test_nesting_limit_is_the_reference_parsers():
    """protobuf refuses a message nested more than 100 deep; a value nested just under it still decodes."""
    outcomes = set()
    for depth in range(30, 60):
        value = b"\x08\x01"
        for _ in range(depth):
            value = ld(5, ld(1, value))
        outcomes.add(assert_same(ld(1, ld(2, ld(2, ld(1, b"\x01" * 16) + ld(2, b"\x02" * 8) + ld(9, ld(2, value)))))))
    assert "BadPayload" in outcomes and len(outcomes) > 1


class _Capture(SpanExporter):
    """Keeps what the SDK's own OTLP encoder makes of each batch: the bytes its exporters send."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def export(self, spans) -> SpanExportResult:
        self.bodies.append(encode_spans(spans).SerializeToString())
        return SpanExportResult.SUCCESS


def test_bodies_of_the_python_sdk_exporter_decode_the_same():
    capture = _Capture()
    provider = TracerProvider(resource=Resource.create({"service.name": "diff", "deployment": "t\u00e9st"}))
    provider.add_span_processor(SimpleSpanProcessor(capture))
    emit_runs(provider, WorkloadPlan(runs=20, fail_rate=0.4, error_rate=0.2))
    tracer = provider.get_tracer("diff")
    with tracer.start_as_current_span("work", attributes={"n": 1.5, "xs": (1, 2), "flag": True}) as span:
        span.add_event("exception", {"exception.type": "ValueError", "exception.message": "boom\n"})
        span.add_link(span.get_span_context(), {"why": "self"})
    provider.shutdown()
    body = b"".join(capture.bodies)  # one request of every batch: repeated fields concatenate
    decoded = otlp_native.decode_protobuf(body)
    assert decoded.span_count > 60 and rows(decoded)[1]["seq"]
    assert assert_same(body) != "BadPayload"


@pytest.mark.parametrize("name", ["js-otlp-proto.bin"])
def test_bodies_of_the_js_sdk_exporter_decode_the_same(name):
    """Bytes the JS SDK's OTLP/proto exporter sent (fixtures/make_js_otlp_body.mjs made them)."""
    body = (FIXTURES / name).read_bytes()
    decoded = otlp_native.decode_protobuf(body)
    assert decoded.span_count >= 3
    assert assert_same(body) != "BadPayload"


def test_json_cells_are_the_references_for_awkward_values():
    values = [ld(1, "\u00e9\U0001f600\x00\x7f\n\"\\/".encode()), f64d(4, math.nan), f64d(4, -math.inf),
              f64d(4, -0.0), f64d(4, 1e16), f64d(4, 5e-324), vi(3, -(2**63)), ld(7, b"\x00\xff\x10"), b""]
    attrs = b"".join(ld(9, ld(1, f"k{i}".encode()) + ld(2, v)) for i, v in enumerate(values))
    attrs += ld(9, ld(1, b"k0") + ld(2, vi(2, 1)))  # k0 again: first position, last value
    span = ld(1, b"\x01" * 16) + ld(2, b"\x02" * 8) + ld(5, b"chat") + attrs
    body = ld(1, ld(2, ld(2, span)))
    assert assert_same(body) != "BadPayload"
    cell = rows(otlp_native.decode_protobuf(body))[0]["attributes"][0]
    assert cell.startswith('{"k0":true,"k1":"NaN","k2":"-Infinity","k3":-0.0,"k4":1e+16,"k5":5e-324,')


@pytest.mark.parametrize("name", [b"", b"svc", b"\xff\x00"])
def test_a_service_name_sent_as_bytes_is_its_base64_text_as_the_reference_reads_it(name):
    """Resource attributes are read like span attributes: bytes become their base64 text, service_name too."""
    resource = ld(1, ld(1, b"service.name") + ld(2, ld(7, name)))
    span = ld(1, b"\x01" * 16) + ld(2, b"\x02" * 8) + ld(5, b"chat")
    body = ld(1, ld(1, resource) + ld(2, ld(2, span)))
    assert assert_same(body) != "BadPayload"
    assert rows(otlp_native.decode_protobuf(body))[0]["service_name"] == [base64.b64encode(name).decode()]


def test_native_decoder_is_built():
    """pip install -e . builds it; the daemon's fallback is for source checkouts that were not built."""
    assert otlp_native.AVAILABLE and otlp_native.NAME == "native"


def test_a_body_of_the_reference_fuzz_seed_decodes_the_same():
    assert assert_same(PROTO) != "BadPayload"


def test_many_attributes_with_repeated_keys_keep_the_first_position_and_the_last_value():
    """Past 16 keys the native decoder finds repeats by hashing; the dict the reference builds is the oracle."""
    keys = [f"k{i % 23}" for i in range(60)] + ["gen_ai.usage.input_tokens", "gen_ai.request.model"] * 3
    attrs = b"".join(ld(9, ld(1, k.encode()) + ld(2, vi(3, i))) for i, k in enumerate(keys))
    nested = ld(6, b"".join(ld(1, ld(1, f"n{i % 7}".encode()) + ld(2, ld(1, str(i).encode()))) for i in range(30)))
    attrs += ld(9, ld(1, b"nested") + ld(2, nested))
    span = ld(1, b"\x01" * 16) + ld(2, b"\x02" * 8) + ld(5, b"chat x") + attrs
    body = ld(1, ld(2, ld(2, span)))
    assert assert_same(body) != "BadPayload"
    spans, _ = rows(otlp_native.decode_protobuf(body))
    assert spans["input_tokens"] == [64]
    assert spans["attributes"][0].startswith('{"k0":46,"k1":47,')


def _evaluation(label: bytes, value: int) -> bytes:
    return ld(11, f64(1, 5) + ld(2, b"gen_ai.evaluation.result") + _kv(3, "gen_ai.evaluation.name", ld(1, b"check"))
              + _kv(3, "gen_ai.evaluation.score.label", ld(1, label))
              + _kv(3, "gen_ai.evaluation.score.value", vi(3, value)))


def _bench_like_body(spans: int) -> bytes:
    """Chat and tool spans as instrumentations send them, each with a dozen attributes the store keeps, and a
    score on every fourth."""
    out = b""
    for i in range(spans):
        attrs = (_kv(9, "gen_ai.operation.name", ld(1, b"chat" if i % 2 else b"execute_tool"))
                 + _kv(9, "gen_ai.request.model", ld(1, b"gpt-4o")) + _kv(9, "gen_ai.usage.input_tokens", vi(3, i))
                 + b"".join(_kv(9, f"app.key{j}", ld(1, b"value %d" % j)) for j in range(10))
                 + (_evaluation(b"pass", i) if i % 4 == 0 else b""))
        out += ld(2, ld(1, (i + 1).to_bytes(16, "big")) + ld(2, (i + 1).to_bytes(8, "big")) + ld(5, b"chat m")
                  + f64(7, 10 + i) + f64(8, 20 + i) + attrs)
    return ld(1, ld(1, _kv(1, "service.name", ld(1, b"svc"))) + ld(2, out))


def test_the_common_path_keeps_no_python_object_per_cell():
    """A decoded request of spans the C module handles holds its columns in Arrow buffers, not as Python
    objects: what it keeps alive is a few hundred Python allocations for 2,000 spans of 40 columns (the lists
    it replaced held one object per cell), and the table the store inserts wraps those buffers, not a copy."""
    body = _bench_like_body(2000)
    assert assert_same(body) != "BadPayload"
    blocks = sys.getallocatedblocks()
    decoded = otlp_native.decode_protobuf(body)
    kept = sys.getallocatedblocks() - blocks
    assert decoded.span_count == 2000
    assert kept < 1000, kept
    assert len(decoded.tail_rows) == 0 and decoded.score_rows == 500
    assert all(not values for values in (*decoded.spans.values(), *decoded.scores.values()))
    attributes = decoded.buffers[otlp_native.COLUMNS.index("attributes")][3]
    table = arrow_batch(decoded, consume=True).spans
    assert table.column("attributes").chunk(0).buffers()[2].address == pa.py_buffer(attributes).address


def test_spans_of_both_paths_in_one_body_take_their_own_rows():
    """Spans the Python step completes (a key refine reads) among spans the C module completes: each row gets
    its own convention columns, and the score rows of both come in span order, as the reference's."""
    def span(i: int, tail: bool) -> bytes:
        attrs = _kv(9, "gen_ai.agent.name", ld(1, b"agent %d" % i)) + _kv(9, "gen_ai.usage.output_tokens", vi(3, i))
        if tail:
            attrs += _kv(9, "llm.invocation_parameters", ld(1, b'{"model":"m%d"}' % i))
        scores = b"".join(_evaluation(b"fail", 10 * i + j) for j in range(i % 3))
        return ld(1, bytes([i + 1]) * 16) + ld(2, bytes([i + 1]) * 8) + ld(5, b"invoke_agent a") + attrs + scores

    pattern = [False, True, True, False, True, False, False]
    body = ld(1, ld(2, b"".join(ld(2, span(i, tail)) for i, tail in enumerate(pattern))))
    assert assert_same(body) != "BadPayload"
    decoded = otlp_native.decode_protobuf(body)
    assert list(decoded.tail_rows) == [i for i, tail in enumerate(pattern) if tail]
    spans, scores = rows(decoded)
    assert spans["request_model"] == [f"m{i}" if tail else None for i, tail in enumerate(pattern)]
    assert spans["output_tokens"] == list(range(len(pattern)))
    assert scores["score_value"] == [float(10 * i + j) for i in range(len(pattern)) for j in range(i % 3)]
    assert 0 < decoded.score_rows < len(scores["seq"])


# --- merged occurrences of a message field: read as they come, never copied; each checked on its own ---

_IDS = ld(1, b"\x01" * 16) + ld(2, b"\x02" * 8) + ld(5, b"chat")


def _merged(site: str, pieces: int) -> bytes:
    """A request whose one message field (at ``site``) comes as ``pieces`` occurrences, each holding a little."""
    def attribute(value_pieces: bytes) -> bytes:
        return ld(9, ld(1, b"k") + value_pieces)

    span = _IDS
    resource = scope = b""
    if site == "array_value":
        span += attribute(ld(2, ld(5, ld(1, b"")) * pieces))
    elif site == "kvlist_value":
        span += attribute(ld(2, ld(6, ld(1, ld(1, b"n"))) * pieces))
    elif site == "KeyValue.value":
        span += attribute(ld(2, ld(5, ld(1, b""))) * pieces)
    elif site == "Span.status":
        span += ld(15, ld(2, b"x")) * pieces
    elif site == "resource":
        resource = ld(1, vi(2, 1)) * pieces
    elif site == "scope":
        scope = ld(1, ld(2, b"1")) * pieces
    return ld(1, resource + ld(2, scope + ld(2, span)))


_MERGE_SITES = ["array_value", "kvlist_value", "KeyValue.value", "Span.status", "resource", "scope"]


@pytest.mark.parametrize("site", _MERGE_SITES)
def test_a_field_merged_from_many_occurrences_costs_memory_and_time_linear_in_the_body(site):
    """10^5 occurrences of one field: copying each into a block of all before it took n^2/2 pieces' bytes
    (here 10 GB); read as they come, the decode holds about the body's size and takes well under a second."""
    import tracemalloc

    body = _merged(site, 100_000)
    tracemalloc.start()
    try:
        start = time.perf_counter()
        decoded = otlp_native.decode_protobuf(body)
        took = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoded.span_count == 1
    assert peak < 32 * len(body) + (8 << 20), f"peak {peak / 2**20:.1f} MiB for a {len(body) / 2**20:.1f} MiB body"
    assert took < 2.0, took
    spans, _ = rows(decoded)
    if site == "array_value":
        assert spans["attributes"] == ['{"k":[' + ",".join(["null"] * 100_000) + "]}"]
    assert assert_same(_merged(site, 50)) != "BadPayload"


# An occurrence cut short, then one that would complete it: the two concatenated read as one field 99 holding
# "08 00", but protobuf parses each occurrence on its own, and the first is truncated.
_TRUNCATED = varint(99 << 3 | 2) + b"\x02"
_COMPLETES = vi(1, 0)


@pytest.mark.parametrize("site", _MERGE_SITES)
def test_a_truncated_occurrence_is_refused_even_when_the_next_would_complete_it(site):
    first, then = _TRUNCATED, _COMPLETES
    span, resource, scope = _IDS, b"", b""
    if site == "array_value":
        span += ld(9, ld(1, b"k") + ld(2, ld(5, first) + ld(5, then)))
    elif site == "kvlist_value":
        span += ld(9, ld(1, b"k") + ld(2, ld(6, first) + ld(6, then)))
    elif site == "KeyValue.value":
        span += ld(9, ld(1, b"k") + ld(2, first) + ld(2, then))
    elif site == "Span.status":
        span += ld(15, first) + ld(15, then)
    elif site == "resource":
        resource = ld(1, first) + ld(1, then)
    elif site == "scope":
        scope = ld(1, first) + ld(1, then)
    body = ld(1, resource + ld(2, scope + ld(2, span)))
    assert assert_same(body) == "BadPayload"
    # Each occurrence whole: the same fields merge, and both decoders keep the span.
    assert assert_same(body.replace(first, varint(99 << 3 | 2) + b"\x00")) != "BadPayload"


@pytest.mark.parametrize("group", [
    vi(0, 1), ld(0, b""), varint(0 << 3 | 5) + b"\0\0\0\0", varint(0 << 3 | 3) + varint(0 << 3 | 4),
    varint(5 << 3 | 3) + vi(0, 7) + varint(5 << 3 | 4),
], ids=["varint", "bytes", "fixed32", "group-0", "nested"])
def test_field_number_0_inside_an_unknown_group_is_skipped_as_upb_skips_it(group):
    """protobuf forbids field number 0 in a message, and both decoders refuse one there; an unknown group is
    not parsed as a message, upb (the reference's parser) only checks its wire types and end tag, so both
    keep a body with a field 0 inside one."""
    wrapped = varint(97 << 3 | 3) + group + varint(97 << 3 | 4)
    for body in (wrapped + ld(1, ld(2, ld(2, _IDS))), ld(1, ld(2, ld(2, _IDS + wrapped))),
                 ld(1, ld(2, ld(2, _IDS + ld(9, ld(1, b"k") + ld(2, wrapped + vi(3, 1))))))):
        assert assert_same(body) != "BadPayload"
    assert assert_same(vi(0, 1) + ld(1, ld(2, ld(2, _IDS)))) == "BadPayload"  # a field 0 in the request


def _vm_hwm(pid: int) -> int:
    """The process's peak resident set, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.system
def test_a_125_kib_body_of_merged_occurrences_leaves_the_daemons_peak_memory_where_it_was(shared_daemon):
    """32,000 array_value occurrences in one attribute: copied into ever longer blocks they raised the daemon's
    peak by 985 MiB; read as they come, by less than 20 MiB."""
    url = shared_daemon.url
    warm = ld(1, ld(2, ld(2, ld(1, b"\x09" * 16) + ld(2, b"\x09" * 8) + ld(5, b"warm") + ld(9, ld(1, b"k")))))
    assert post(url, "/v1/traces", warm, "application/x-protobuf").status == 200
    body = _merged("array_value", 32_000).replace(b"\x01" * 16, b"\x0a" * 16)
    assert len(body) < 126 * 1024
    before = _vm_hwm(shared_daemon.pid)
    assert post(url, "/v1/traces", body, "application/x-protobuf").status == 200
    grew = _vm_hwm(shared_daemon.pid) - before
    assert grew < 20 << 20, f"peak grew {grew / 2**20:.0f} MiB"
    assert sql(url, "SELECT length(attributes) AS n FROM spans WHERE trace_id = ?", ["0a" * 16]) == [
        {"n": len('{"k":[]}') + 32_000 * 5 - 1}]


def _fnv_colliding_keys(doublings: int) -> list[bytes]:
    """2^doublings keys whose FNV-1a hashes (the attribute table's hash once, unseeded) agree in their low 17
    bits, so all take one slot of a table of up to 2^17: FNV-1a's low bits depend only on the low bits before,
    so blocks that take one state to the same next state combine into keys that collide whole."""
    mask, prime = (1 << 17) - 1, 1099511628211
    state = 1469598103934665603 & mask
    pairs = []
    while len(pairs) < doublings:
        seen: dict[int, bytes] = {}
        for block in itertools.product(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", repeat=3):
            h = state
            for byte in block:
                h = ((h ^ byte) * prime) & mask
            if h in seen:
                pairs.append((seen[h], bytes(block)))
                state = h
                break
            seen[h] = bytes(block)
    return [b"".join(choice) for choice in itertools.product(*pairs)]


def _colliding_body(trace: bytes) -> bytes:
    attrs = b"".join(ld(9, ld(1, key) + ld(2, vi(3, 1))) for key in _fnv_colliding_keys(16))
    return ld(1, ld(2, ld(2, ld(1, trace) + ld(2, b"\x03" * 8) + ld(5, b"chat") + attrs)))


def test_keys_made_to_collide_decode_in_linear_time():
    body = _colliding_body(b"\x04" * 16)
    start = time.perf_counter()
    decoded = otlp_native.decode_protobuf(body)
    took = time.perf_counter() - start
    assert decoded.span_count == 1
    assert took < 0.5, f"{took:.2f} s for 65,536 keys"


@pytest.mark.system
def test_a_body_of_colliding_keys_neither_slows_its_request_nor_stalls_healthz(shared_daemon):
    """65,536 keys one slot under the old hash took the daemon seconds per request with the GIL held, and
    /healthz waited as long; keyed per process, they spread."""
    url = shared_daemon.url
    body = _colliding_body(b"\x05" * 16)
    answers: list[tuple[int, float]] = []

    def send() -> None:
        start = time.perf_counter()
        answers.append((post(url, "/v1/traces", body, "application/x-protobuf").status, time.perf_counter() - start))

    sender = threading.Thread(target=send)
    sender.start()
    waits = []
    while sender.is_alive():
        start = time.perf_counter()
        assert get(url, "/healthz").status == 200
        waits.append(time.perf_counter() - start)
        time.sleep(0.02)
    sender.join()
    [(status, took)] = answers
    assert status == 200
    assert took < 2.0, f"the request took {took:.2f} s"
    assert max(waits) < 1.0, f"/healthz waited {max(waits):.2f} s"
    assert sql(url, "SELECT count(*) AS n FROM spans WHERE trace_id = ?", ["05" * 16]) == [{"n": 1}]
