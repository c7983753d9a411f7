"""Decode OTLP trace requests (protobuf or JSON) into column lists for the store.

Pure: bytes in, columns out. HTTP and gRPC both come through here, so both store the same rows.
A span that breaks the data model (ids of the wrong length or all zero, times past 2^63 ns) is
counted as rejected and the rest of the batch is kept: the OTLP partial-success contract
(specification.md, "Partial Success"). A promoted value its column cannot hold (tokens past BIGINT,
a cost or score that is not finite, a score time past 2^63 ns) is NULL in its column (the score time
falls back to the span's end) and counted in ``nulled``; the raw attributes keep the original. So
every column list holds only values of its Arrow type, and the store's Arrow build cannot fail on
data. A body that cannot be decoded at all raises ``BadPayload`` (HTTP 400, gRPC INVALID_ARGUMENT).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from lousho.kernel._checked_json import NestedTooDeep, invalid_text, loads_bounded, may_hold_invalid_text
from lousho.observe.runs import conventions, normalise
from lousho.observe.store.schema import PROMOTED_TEXT

EVALUATION_EVENT = "gen_ai.evaluation.result"

SPAN_FIELDS = (
    "key_hi",
    "key_lo",
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "start_ns",
    "end_ns",
    "status_code",
    "status_message",
    "service_name",
    "scope_name",
    *PROMOTED_TEXT,
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "probe",
    "attributes",
    "resource_key",  # the span's resource is ``Decoded.resources[resource_key]``: kept once, not per span
    "events",
    "links",
    *conventions.TEXT_COLUMNS,
    *conventions.TOKEN_COLUMNS,
    *conventions.REVISION_COLUMNS,
)
SCORE_FIELDS = (
    "key_hi",
    "key_lo",
    "seq",
    "trace_id",
    "span_id",
    "run_id",
    "name",
    "score_value",
    "score_label",
    "explanation",
    "failed_check",
    "passed",
    "error_type",
    "time_ns",
    "attributes",
)

_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_STATUS = ("UNSET", "OK", "ERROR")
_MAX_NS = 2**63
# Why a span with an earlier span's key in the same request is refused (native/otlp/otlp_native.h says the same).
DUPLICATE_SPAN = ("has the key of an earlier span of this request (its span_id and the low 64 bits of its trace_id); "
                  "the first is kept")
# The deepest nesting of arrays and objects an OTLP/JSON body may have; a deeper one is refused before it is
# parsed. A span's event attribute value sits 12 levels down and each AnyValue nested in it takes 3 (array) or 4
# (kvlist): 128 holds 38 nested arrays or 29 nested kvlists there, past the 24 AnyValues the native transcoder
# takes, and exporters send a few. json.loads would otherwise recurse as deep as the body goes.
MAX_JSON_DEPTH = 128
_PASS_LABELS = frozenset({"pass", "passed", "true", "success", "correct", "ok"})
_FAIL_LABELS = frozenset({"fail", "failed", "false", "failure", "incorrect", "error"})


class BadPayload(ValueError):
    """The body is not an OTLP trace request in the declared encoding."""


@dataclass
class Decoded:
    spans: dict[str, list[Any]] = field(default_factory=lambda: {f: [] for f in SPAN_FIELDS})
    scores: dict[str, list[Any]] = field(default_factory=lambda: {f: [] for f in SCORE_FIELDS})
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    nulled: int = 0  # promoted values stored as NULL (or a fallback) because their column cannot hold them
    # The distinct resources of the request, by key: a span names its own by ``resource_key``, so a large
    # resource shared by many spans is held (and stored) once.
    resources: dict[int, str] = field(default_factory=dict)

    def add_resource(self, resource_json: str) -> int:
        """Note a resource's attributes (as JSON) and return the key its spans carry."""
        key = resource_key(resource_json)
        self.resources.setdefault(key, resource_json)
        return key

    @property
    def span_count(self) -> int:
        return len(self.spans["span_id"])

    @property
    def score_count(self) -> int:
        return len(self.scores["seq"])

    def error_message(self) -> str:
        return error_message(self.errors, len(self.errors))


# The messages of rejected spans a partial-success answer shows; the rest are counted.
SHOWN_ERRORS = 5


def error_message(errors: list[str], count: int) -> str:
    """The partial-success message of ``count`` rejected spans, the first of whose messages are ``errors``."""
    shown = "; ".join(errors[:SHOWN_ERRORS])
    more = count - SHOWN_ERRORS
    return shown + (f"; and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class Checked:
    """What decoding a body would report, without its rows: a request can be answered (partial success, or
    BadPayload) before it is decoded for the store. ``errors`` holds the first ``SHOWN_ERRORS`` messages of the
    ``rejected`` spans, enough for the same ``error_message()``."""

    span_count: int
    score_count: int
    rejected: int
    nulled: int
    errors: tuple[str, ...]

    @classmethod
    def of(cls, decoded: Decoded) -> Checked:
        return cls(decoded.span_count, decoded.score_count, decoded.rejected, decoded.nulled,
                   tuple(decoded.errors[:SHOWN_ERRORS]))

    def error_message(self) -> str:
        return error_message(list(self.errors), self.rejected)


def resource_key(resource_json: str) -> int:
    """The key of a resource: the first 63 bits of the SHA-256 of its JSON, so it fits a signed BIGINT and the
    same resource gets the same key in every request and process (the store keeps each key once). A
    cryptographic hash: a client cannot make its resource take the key of another's. Schema migration 5
    computes the same in SQL for the spans stored before it."""
    return int.from_bytes(hashlib.sha256(resource_json.encode()).digest()[:8], "big") >> 1


def decode_protobuf(body: bytes) -> Decoded:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as e:
        raise BadPayload(f"not an OTLP ExportTraceServiceRequest in protobuf: {e}") from None
    return decode_request(request)


def check_protobuf(body: bytes) -> Checked:
    """``decode_protobuf``'s counts and refusal; this reference builds the rows and drops them."""
    return Checked.of(decode_protobuf(body))


def check_json(body: bytes) -> Checked:
    """``decode_json``'s counts and refusal; this reference builds the rows and drops them."""
    return Checked.of(decode_json(body))


def decode_json(body: bytes) -> Decoded:
    """OTLP/JSON: protobuf JSON mapping, but ids in hex, enums as integers, unknown keys ignored."""
    try:
        return _decode_json(body)
    except (TypeError, AttributeError, KeyError, ValueError, OverflowError, RecursionError) as e:
        if isinstance(e, BadPayload):
            raise
        # A shape no check above foresaw is still the client's malformed body, not a server error.
        raise BadPayload(f"malformed OTLP/JSON: {type(e).__name__}: {e}") from None


def _decode_json(body: bytes) -> Decoded:
    try:
        doc = loads_bounded(body, MAX_JSON_DEPTH)
    except NestedTooDeep as e:
        raise BadPayload(str(e)) from None
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError
        raise BadPayload(f"body is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BadPayload("an OTLP/JSON body is an object with a resourceSpans array")
    if "resourceLogs" in doc or "resourceMetrics" in doc:
        raise BadPayload("this is a logs or metrics payload; this endpoint takes traces only")
    out = Decoded()
    seen: set[bytes] = set()  # the request's accepted span keys (``_span_problem``)
    check = may_hold_invalid_text(body)
    for rs in _objects(doc.get("resourceSpans"), "resourceSpans"):
        resource = _parse_part(rs.get("resource"), Resource, "resource", check)
        for ss in _objects(rs.get("scopeSpans"), "scopeSpans"):
            scope = _parse_part(ss.get("scope"), InstrumentationScope, "scope", check)
            context = _Context(out, resource, scope)
            spans = ss.get("spans") or []
            if not isinstance(spans, list):
                raise BadPayload("spans must be an array")
            for raw in spans:
                span = _json_span(raw, out, check)
                if span is not None:
                    _add_span(out, context, span, seen)
    return out


def _objects(value: Any, what: str) -> list[dict[str, Any]]:
    """A JSON array of objects (absent or null: empty); anything else is not OTLP/JSON."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise BadPayload(f"{what} must be an array of objects")
    return value


def decode_request(request: ExportTraceServiceRequest) -> Decoded:
    out = Decoded()
    seen: set[bytes] = set()  # the request's accepted span keys (``_span_problem``)
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            context = _Context(out, rs.resource, ss.scope)
            for span in ss.spans:
                _add_span(out, context, span, seen)
    return out


# service_name and scope_name are copied into every span's row: a longer one is cut there (the resource keeps
# the whole service.name once), so one request of a huge name on many spans costs the rows little.
MAX_SHARED_NAME = 256


class _Context:
    """What the spans of one scope share: resource and scope, converted once."""

    __slots__ = ("resource_key", "service_name", "scope_name")

    def __init__(self, out: Decoded, resource: Resource, scope: InstrumentationScope) -> None:
        attrs = _attributes(resource.attributes)
        self.resource_key = out.add_resource(_dumps(attrs))
        service = attrs.get("service.name")
        self.service_name = service[:MAX_SHARED_NAME] if isinstance(service, str) else None
        self.scope_name = scope.name[:MAX_SHARED_NAME] or None


def _add_span(out: Decoded, ctx: _Context, span: Span, seen: set[bytes]) -> None:
    problem = _span_problem(span, seen)
    if problem:
        out.rejected += 1
        out.errors.append(problem)
        return
    trace_id = span.trace_id.hex()
    span_id = span.span_id.hex()
    attrs = _attributes(span.attributes)
    key_hi = int.from_bytes(span.span_id, "big")
    key_lo = int.from_bytes(span.trace_id[8:], "big")
    cols = out.spans
    cols["key_hi"].append(key_hi)
    cols["key_lo"].append(key_lo)
    cols["trace_id"].append(trace_id)
    cols["span_id"].append(span_id)
    cols["parent_span_id"].append(span.parent_span_id.hex() or None)
    cols["name"].append(span.name)
    cols["kind"].append(_KINDS[span.kind] if 0 <= span.kind < len(_KINDS) else "UNSPECIFIED")
    cols["start_ns"].append(span.start_time_unix_nano)
    cols["end_ns"].append(span.end_time_unix_nano)
    code = span.status.code
    cols["status_code"].append(_STATUS[code] if 0 <= code < len(_STATUS) else "UNSET")
    cols["status_message"].append(span.status.message or None)
    cols["service_name"].append(ctx.service_name)
    cols["scope_name"].append(ctx.scope_name)
    cols["attributes"].append(_dumps(attrs))
    cols["resource_key"].append(ctx.resource_key)
    events = [
        {
            "name": e.name,
            "time_ns": e.time_unix_nano,
            "attributes": _attributes(e.attributes),
        }
        for e in span.events
    ]
    cols["events"].append(_dumps(events) if events else None)
    links = [
        {
            "trace_id": link.trace_id.hex(),
            "span_id": link.span_id.hex(),
            "attributes": _attributes(link.attributes),
        }
        for link in span.links
    ]
    cols["links"].append(_dumps(links) if links else None)
    add_conventions(out, attrs, events, span.name, span.start_time_unix_nano, key_hi, key_lo, trace_id, span_id,
                    span.end_time_unix_nano)


def add_conventions(
    out: Decoded,
    attrs: dict[str, Any],
    events: list[dict[str, Any]] | None,
    name: str,
    start_ns: int,
    key_hi: int,
    key_lo: int,
    trace_id: str,
    span_id: str,
    end_ns: int,
) -> None:
    """The columns read from conventions (promoted, refined, cost) and the score rows of the span whose raw
    columns were just appended. The native decoder calls this too, for the spans it has work for."""
    events = events or []
    cols = out.spans
    cols["operation"].append(normalise.operation(attrs, name))
    for column in PROMOTED_TEXT[1:]:
        cols[column].append(normalise.promote(attrs, column))
    for column in ("input_tokens", "output_tokens", "cost_usd"):
        value, nulled = normalise.promote_checked(attrs, column)
        cols[column].append(value)
        out.nulled += nulled
    cols["probe"].append(normalise.as_bool(attrs.get("lousho.probe")))
    conventions.refine(cols, attrs, events, name, start_ns)
    if events:
        run_id = cols["run_id"][-1]
        for seq, event in enumerate(events):
            if event["name"] == EVALUATION_EVENT:
                _add_score(out, key_hi, key_lo, seq, trace_id, span_id, run_id, event, end_ns)


def _add_score(
    out: Decoded,
    key_hi: int,
    key_lo: int,
    seq: int,
    trace_id: str,
    span_id: str,
    run_id: str | None,
    event: dict[str, Any],
    span_end_ns: int,
) -> None:
    attrs = event["attributes"]
    label = attrs.get("gen_ai.evaluation.score.label")
    label = label if isinstance(label, str) else None
    failed_check = attrs.get("lousho.check.failed")
    failed_check = str(failed_check) if failed_check not in (None, "") else None
    passed: bool | None = None
    if label is not None and label.lower() in _PASS_LABELS:
        passed = True
    elif label is not None and label.lower() in _FAIL_LABELS:
        passed = False
    if failed_check is not None:
        passed = False
    value = attrs.get("gen_ai.evaluation.score.value")
    cols = out.scores
    cols["key_hi"].append(key_hi)
    cols["key_lo"].append(key_lo)
    cols["seq"].append(seq)
    cols["trace_id"].append(trace_id)
    cols["span_id"].append(span_id)
    cols["run_id"].append(run_id)
    name = attrs.get("gen_ai.evaluation.name")
    cols["name"].append(str(name) if name is not None else None)
    score = normalise.as_float(value) if isinstance(value, int | float) else None
    out.nulled += value is not None and score is None
    cols["score_value"].append(score)
    cols["score_label"].append(label)
    explanation = attrs.get("gen_ai.evaluation.explanation")
    cols["explanation"].append(str(explanation) if explanation is not None else None)
    cols["failed_check"].append(failed_check)
    cols["passed"].append(passed)
    error_type = attrs.get("error.type")
    cols["error_type"].append(str(error_type) if error_type is not None else None)
    # time_ns is NOT NULL: an event time past BIGINT takes its span's end (already checked to fit).
    time_ns = event["time_ns"]
    if time_ns > normalise.INT64_MAX:
        time_ns = span_end_ns
        out.nulled += 1
    cols["time_ns"].append(time_ns)
    cols["attributes"].append(_dumps(attrs))


def _span_problem(span: Span, seen: set[bytes]) -> str | None:
    """Why ``span`` is refused, or None; ``seen``, the keys of the request's spans accepted so far, gets its key.
    A span repeating an earlier one's key (its span_id and the low half of its trace_id, the store's key) is
    refused: the store keeps only the first, and the client should hear of the second rather than lose it."""
    if len(span.trace_id) != 16 or not any(span.trace_id):
        return f"span {span.name!r}: trace_id must be 16 bytes, not all zero"
    if len(span.span_id) != 8 or not any(span.span_id):
        return f"span {span.name!r}: span_id must be 8 bytes, not all zero"
    if span.parent_span_id and len(span.parent_span_id) != 8:
        return f"span {span.name!r}: parent_span_id must be empty or 8 bytes"
    if span.start_time_unix_nano >= _MAX_NS or span.end_time_unix_nano >= _MAX_NS:
        return f"span {span.name!r}: timestamps past the year 2262 do not fit a signed 64-bit ns"
    key = span.span_id + span.trace_id[8:]  # bytes: their hash is randomised, a tuple of ints' is not
    if key in seen:
        return f"span {span.name!r}: {DUPLICATE_SPAN}"
    seen.add(key)
    return None


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return v.int_value
    if kind == "double_value":
        return v.double_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    return None


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        # NaN and infinities are not JSON and DuckDB's JSON type would refuse the whole batch;
        # keep them as the strings the protobuf JSON mapping uses.
        return json.dumps(_finite(value), separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


# --- OTLP/JSON: hex ids to the protobuf JSON mapping's base64, then the standard parser ---

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _parse_part(doc: Any, message_type: type, what: str, check_text: bool) -> Any:
    message = message_type()
    if doc is None:
        return message
    try:
        if check_text:
            _check_text(doc)
        json_format.ParseDict(doc, message, ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError) as e:
        raise BadPayload(f"{what} is malformed: {e}") from None
    return message


def _json_span(raw: Any, out: Decoded, check_text: bool) -> Span | None:
    """One span of an OTLP/JSON body; a malformed one is rejected alone. ``check_text``: the body may hold text
    that is not valid Unicode."""
    try:
        if not isinstance(raw, dict):
            raise ValueError("a span must be an object")
        if check_text:
            _check_text(raw)
        doc = _hex_ids_to_base64(raw)
        for i, link in enumerate(doc.get("links") or []):
            if isinstance(link, dict):
                doc["links"][i] = _hex_ids_to_base64(link)
        _fit_attribute_values(doc)
        span = Span()
        json_format.ParseDict(doc, span, ignore_unknown_fields=True)
        return span
    except (json_format.ParseError, TypeError, ValueError, AttributeError) as e:
        out.rejected += 1
        name = raw.get("name") if isinstance(raw, dict) else None
        out.errors.append(f"span {name!r}: {e}")
        return None


def _check_text(doc: Any) -> None:
    """Text that is not valid Unicode (a lone surrogate) anywhere in a resource, scope or span, key or value,
    refuses it: the resource's or scope's request, or the span alone. ParseDict says "Unpaired surrogate" for
    some strings, but its lookup of such a key or enum name fails with a SystemError, and other fields put the
    text into their message, which no response can carry."""
    bad = invalid_text(doc)
    if bad is not None:
        raise ValueError(f"text {bad} is not valid Unicode (a lone surrogate)")


def _fit_attribute_values(span: dict[str, Any]) -> None:
    """Attribute values the protobuf mapping cannot hold, kept instead of losing their span.

    OTLP/JSON writes 64-bit integers as strings, so a client may send ``"intValue":
    "123456789012345678901"``; and ``"doubleValue": 1e400`` (or an integer of 400 digits) is past float64, an
    infinity, which the mapping accepts only quoted. Both are the attribute's value, not a malformed span: the
    integer is kept as its text (a promoted column then sees it out of range and is NULL), the double as the
    mapping's ``"Infinity"``.
    """
    lists = [span.get("attributes")]
    for part in ("events", "links"):
        items = span.get(part)
        if isinstance(items, list):
            lists += [item.get("attributes") for item in items if isinstance(item, dict)]
    for kvs in lists:
        if not isinstance(kvs, list):
            continue
        for kv in kvs:
            value = kv.get("value") if isinstance(kv, dict) else None
            if isinstance(value, dict):
                kv["value"] = _fit_any_value(value)


def _fit_any_value(value: dict[str, Any]) -> dict[str, Any]:
    number = value.get("intValue")
    if isinstance(number, str | int) and not isinstance(number, bool):
        try:
            parsed = int(number)
        except ValueError:
            return value
        if not normalise.INT64_MIN <= parsed <= normalise.INT64_MAX:
            return {"stringValue": str(number)}
    real = value.get("doubleValue")
    if isinstance(real, int) and not isinstance(real, bool):
        try:
            float(real)
        except OverflowError:  # an integer with ~309 digits or more: as far past float64 as 1e400
            return {"doubleValue": "Infinity" if real > 0 else "-Infinity"}
    if isinstance(real, float) and not math.isfinite(real):
        return {"doubleValue": "NaN" if real != real else ("Infinity" if real > 0 else "-Infinity")}
    return value


def _hex_ids_to_base64(doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(doc)
    for key in _ID_KEYS:
        value = doc.get(key)
        if value in (None, ""):
            doc.pop(key, None)
            continue
        if not isinstance(value, str):
            raise ValueError(f"{key} must be a hex string")
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise ValueError(f"{key} is not hex: {value[:40]!r}") from None
        doc[key] = base64.b64encode(raw).decode("ascii")
    return doc
