"""The native OTLP/JSON path: ``native/json/*.c`` transcodes a JSON request to OTLP/protobuf wire bytes, which the
native protobuf decoder reads, so the conventions live in one place and the result is
``otlp_decode.decode_json``'s ``Decoded``.

The transcoder takes the bodies whose meaning it can state exactly (the shapes the OTel exporters send, and
more) and hands every other body back: that one goes to ``otlp_decode.decode_json``, the reference, which
also gives every error. ``path_counts`` says how many went each way.

``AVAILABLE`` is False unless both extensions were built; the daemon then runs the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    EntityRef,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from lousho.observe.decode import native_ext, otlp_decode, otlp_native
from lousho.observe.decode.otlp_decode import Checked, Decoded

_otlp_json = native_ext.load("_otlp_json")

AVAILABLE = _otlp_json is not None and otlp_native.AVAILABLE
NAME = "native" if AVAILABLE else "python"

# In the order of the C module's K_* enum.
_MESSAGES = (Resource, InstrumentationScope, Span, Span.Event, Span.Link, Status, KeyValue, AnyValue, ArrayValue,
             KeyValueList, EntityRef)


def _field_names(message: type) -> frozenset[str]:
    """Every name json_format takes for a field of the message: its JSON name and its proto name."""
    fields = message.DESCRIPTOR.fields
    return frozenset({f.json_name for f in fields} | {f.name for f in fields})


if AVAILABLE:
    _otlp_json.configure(tuple(_field_names(m) for m in _MESSAGES), otlp_decode.MAX_JSON_DEPTH)


def decode_json(body: bytes) -> Decoded:
    """As ``otlp_decode.decode_json``; raises BadPayload for a body that is not an OTLP/JSON trace request."""
    return _through_wire(body, otlp_native.decode_protobuf, otlp_decode.decode_json)


def check_json(body: bytes) -> Checked:
    """What ``decode_json`` would report for ``body``, or the BadPayload it would raise, building no rows when
    the body transcodes: the check then holds the body, its protobuf wire bytes (smaller than the JSON) and the
    accepted spans' keys (``otlp_native.check_protobuf``).
    A body handed to the reference is decoded there and its rows dropped."""
    return _through_wire(body, otlp_native.check_protobuf, otlp_decode.check_json)


_T = TypeVar("_T")


def _through_wire(body: bytes, native: Callable[[bytes], _T], reference: Callable[[bytes], _T]) -> _T:
    """``native`` on the body transcoded to protobuf, or ``reference`` on the JSON when it cannot be."""
    if not AVAILABLE:
        raise RuntimeError("the native decoders are not built: pip install -e . builds them")
    wire = _otlp_json.transcode(body)
    return reference(body) if wire is None else native(wire)


def path_counts() -> dict[str, int]:
    """Bodies since import that were transcoded, and that went to the reference."""
    return dict(_otlp_json.stats()) if AVAILABLE else {}


def json_decoder() -> Callable[[bytes], Decoded]:
    """The decoder the daemon runs for OTLP/JSON: this one when built, else the reference."""
    return decode_json if AVAILABLE else otlp_decode.decode_json


def json_checker() -> Callable[[bytes], Checked]:
    """The check to run on an OTLP/JSON body before acking it: ``check_json`` when built, else the reference's."""
    return check_json if AVAILABLE else otlp_decode.check_json
