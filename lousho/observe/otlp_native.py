"""The native OTLP/protobuf decoder (``_otlp_native.c``): the same ``Decoded`` as ``otlp_decode.decode_protobuf``,
read straight from the wire bytes with no protobuf objects.

The C module fills the raw columns and the JSON cells; the convention columns (``normalise``,
``conventions``, cost, scores) stay in Python, in ``otlp_decode.add_conventions``, called only for the spans
that carry a key those read, have events, or are named as agent spans. Every other span's convention
columns are NULL except its operation, which its name gives. ``AVAILABLE`` is False when the extension was
not built (a source checkout without ``pip install -e .``): the daemon then runs the Python decoder.
"""

from __future__ import annotations

from collections.abc import Callable

from lousho.observe import conventions, normalise, otlp_decode
from lousho.observe.otlp_decode import _KINDS, _STATUS, SPAN_FIELDS, BadPayload, Decoded, add_conventions

try:
    from lousho.observe import _otlp_native
except ImportError:  # not built: the caller falls back to the Python decoder
    _otlp_native = None

AVAILABLE = _otlp_native is not None
NAME = "native" if AVAILABLE else "python"

# The columns the C module fills for every span, in the order of its C_* enum.
BASE_COLUMNS = ("key_hi", "key_lo", "trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns",
                "status_code", "status_message", "service_name", "scope_name", "attributes", "resource", "events",
                "links", "operation")
# NULL for a span add_conventions does not see: it would have set them NULL too.
PLAIN_COLUMNS = tuple(f for f in SPAN_FIELDS if f not in BASE_COLUMNS)


def watched_keys() -> tuple[str, ...]:
    """Every attribute key the convention step reads; a span with none of them needs no Python."""
    keys = {*normalise.OPERATION_KEYS, "lousho.probe", *conventions.WATCHED_KEYS}
    for aliases in normalise.ALIASES.values():
        keys.update(aliases)
    return tuple(sorted(keys))


if _otlp_native is not None:
    _otlp_native.configure(BadPayload, add_conventions, _KINDS, _STATUS, normalise.NAME_PREFIXES, "invoke_agent",
                           watched_keys())


def decode_protobuf(body: bytes) -> Decoded:
    """As ``otlp_decode.decode_protobuf``; raises BadPayload for a body that is not an OTLP trace request."""
    if _otlp_native is None:
        raise RuntimeError("the native decoder is not built: pip install -e . builds it")
    out = Decoded()
    cols = out.spans
    out.rejected = _otlp_native.decode(body, tuple(cols[c] for c in BASE_COLUMNS),
                                       tuple(cols[c] for c in PLAIN_COLUMNS), out, out.errors)
    return out


def protobuf_decoder() -> Callable[[bytes], Decoded]:
    """The decoder the daemon runs for OTLP/protobuf (HTTP and gRPC): this one when built, else the reference."""
    return decode_protobuf if AVAILABLE else otlp_decode.decode_protobuf
