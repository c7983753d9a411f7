"""The native OTLP/protobuf decoder (``_otlp_native.c``): the same ``Decoded`` as ``otlp_decode.decode_protobuf``,
read straight from the wire bytes with no protobuf objects.

The C module fills the raw columns and the JSON cells, and the convention columns of the common case from
the alias tables of ``normalise`` (passed at import, so they stay in one place), asking
``conventions.table_price`` for a call's cost, with the error type of an ``exception`` event and the score
rows of ``gen_ai.evaluation.result`` events. A span with anything more (a key ``refine`` reads, messages of a
span without a run id, a value only Python coerces) goes to ``otlp_decode.add_conventions``, the
reference's own code.

``AVAILABLE`` is False when the extension was not built (a source checkout without ``pip install -e .``):
the daemon then runs the Python decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lousho.observe import conventions, normalise, otlp_decode
from lousho.observe.otlp_decode import (
    _FAIL_LABELS,
    _KINDS,
    _PASS_LABELS,
    _STATUS,
    EVALUATION_EVENT,
    SCORE_FIELDS,
    SPAN_FIELDS,
    BadPayload,
    Decoded,
    add_conventions,
)
from lousho.observe.schema import PROMOTED_TEXT

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
# normalise.promote's columns, each with its coercion (the C P_* enum) and its aliases, first present wins.
PROMOTED_COLUMNS = (*PROMOTED_TEXT[1:], "input_tokens", "output_tokens", "cost_usd")
_TEXT, _JSONISH, _INT, _FLOAT = range(4)
# Those refine reads, in the order of the C S_* enum.
_SPECIAL = ("agent_name", "conversation_id", "provider", "request_model", "response_model", "input_tokens",
            "output_tokens", "cost_usd", "error_type", "run_id")
# The score columns in the order of the C R_* enum.
SCORE_COLUMNS = ("key_hi", "key_lo", "seq", "trace_id", "span_id", "run_id", "name", "score_value", "score_label",
                 "explanation", "failed_check", "passed", "error_type", "time_ns", "attributes")
assert sorted(SCORE_COLUMNS) == sorted(SCORE_FIELDS)
# NULL for a span the Python step does not see: refine leaves them so when no key it reads is present.
NULL_COLUMNS = tuple(f for f in SPAN_FIELDS
                     if f not in (*BASE_COLUMNS, *PROMOTED_COLUMNS, "probe", "cost_source"))


def _coercion(column: str) -> int:
    if column in normalise.INT_COLUMNS:
        return _INT
    if column in normalise.FLOAT_COLUMNS:
        return _FLOAT
    return _JSONISH if column in normalise.JSONISH_COLUMNS else _TEXT


def fallback_keys() -> tuple[str, ...]:
    """Keys whose presence sends a span to the Python step: every key refine reads, and the span-kind keys of
    other conventions that ``normalise.operation`` maps."""
    return tuple(sorted({*conventions.WATCHED_KEYS, *normalise.OPERATION_KEYS[1:]}))


def _configure(native: Any) -> None:
    keys = {*normalise.OPERATION_KEYS, "lousho.probe", *fallback_keys()}
    for aliases in normalise.ALIASES.values():
        keys.update(aliases)
    spec = tuple((_coercion(c), normalise.ALIASES[c]) for c in PROMOTED_COLUMNS)
    native.configure(BadPayload, add_conventions, conventions.table_price, _KINDS, _STATUS, normalise.NAME_PREFIXES,
                     "invoke_agent", "reported", "price-table", tuple(sorted(keys)), fallback_keys(),
                     tuple(sorted(conventions.MESSAGE_KEYS)), normalise.OPERATION_KEYS[0], "lousho.probe", spec,
                     tuple(PROMOTED_COLUMNS.index(c) for c in _SPECIAL),
                     (EVALUATION_EVENT, "exception", conventions.DETAILS_EVENT), _PASS_LABELS, _FAIL_LABELS)


if _otlp_native is not None:
    _configure(_otlp_native)


def decode_protobuf(body: bytes) -> Decoded:
    """As ``otlp_decode.decode_protobuf``; raises BadPayload for a body that is not an OTLP trace request."""
    if _otlp_native is None:
        raise RuntimeError("the native decoder is not built: pip install -e . builds it")
    out = Decoded()
    cols = out.spans
    out.rejected = _otlp_native.decode(body, tuple(cols[c] for c in BASE_COLUMNS),
                                       tuple(cols[c] for c in PROMOTED_COLUMNS), cols["probe"], cols["cost_source"],
                                       tuple(cols[c] for c in NULL_COLUMNS),
                                       tuple(out.scores[c] for c in SCORE_COLUMNS), out, out.errors)
    return out


def path_counts() -> dict[str, int]:
    """Spans decoded since import whose convention columns were computed natively, natively with a price from
    the table, and by the Python step."""
    return dict(_otlp_native.stats()) if _otlp_native is not None else {}


def protobuf_decoder() -> Callable[[bytes], Decoded]:
    """The decoder the daemon runs for OTLP/protobuf (HTTP and gRPC): this one when built, else the reference."""
    return decode_protobuf if AVAILABLE else otlp_decode.decode_protobuf
