"""The native OTLP/protobuf decoder (``native/otlp/*.c``): the rows of ``otlp_decode.decode_protobuf``, read
straight from the wire bytes with no protobuf objects, written as Arrow buffers rather than Python lists.

The C module writes every span column in Arrow's layout (validity bitmap, values, string offsets and
UTF-8) into buffers of its own, which ``NativeDecoded.span_table`` wraps with ``pa.Array.from_buffers``
without a copy: no Python object per cell. It fills the raw columns and the JSON cells, and the
convention columns of the common case from the alias tables of ``normalise`` (passed at import, so they
stay in one place), asking ``conventions.table_price`` for a call's cost, with the error type of an
``exception`` event and the score rows of ``gen_ai.evaluation.result`` events. A span with anything more (a
key ``refine`` reads, messages of a span without a run id, a value only Python coerces) goes to
``otlp_decode.add_conventions``, the reference's own code: it appends that span's convention columns to the
``Decoded``'s lists, the C module leaves NULLs at its row and notes the row, and ``span_table`` puts the
lists' values there. Score rows likewise: the Python step's go before the native row they preceded.

``AVAILABLE`` is False when the extension was not built (a source checkout without ``pip install -e .``):
the daemon then runs the Python decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lousho.observe.decode import native_ext, otlp_decode
from lousho.observe.decode.otlp_decode import (
    _FAIL_LABELS,
    _KINDS,
    _PASS_LABELS,
    _STATUS,
    EVALUATION_EVENT,
    SCORE_FIELDS,
    SHOWN_ERRORS,
    SPAN_FIELDS,
    BadPayload,
    Checked,
    Decoded,
    add_conventions,
)
from lousho.observe.runs import conventions, normalise
from lousho.observe.store.schema import PROMOTED_TEXT

_otlp_native = native_ext.load("_otlp_native")

AVAILABLE = _otlp_native is not None
NAME = "native" if AVAILABLE else "python"

# The columns the C module fills for every span, in the order of its C_* enum.
BASE_COLUMNS = ("key_hi", "key_lo", "trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns",
                "status_code", "status_message", "service_name", "scope_name", "attributes", "resource_key", "events",
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
# Every span column, in the order the C module returns them.
COLUMNS = (*BASE_COLUMNS, *PROMOTED_COLUMNS, "probe", "cost_source", *NULL_COLUMNS)
assert sorted(COLUMNS) == sorted(SPAN_FIELDS)
# The columns the Python step fills for the spans it sees: the operation and every one after it.
TAIL_COLUMNS = COLUMNS[len(BASE_COLUMNS) - 1:]
# How the C module stores a column (its T_* enum), checked against the store's Arrow type at assembly.
_T_STR, _T_I64, _T_F64, _T_BOOL, _T_I32 = range(5)
_BASE_STORAGE = (_T_I64, _T_I64, *[_T_STR] * 5, _T_I64, _T_I64, *[_T_STR] * 5, _T_I64, *[_T_STR] * 3)


def _coercion(column: str) -> int:
    if column in normalise.INT_COLUMNS:
        return _INT
    if column in normalise.FLOAT_COLUMNS:
        return _FLOAT
    return _JSONISH if column in normalise.JSONISH_COLUMNS else _TEXT


_PROMOTED_STORAGE = {_TEXT: _T_STR, _JSONISH: _T_STR, _INT: _T_I64, _FLOAT: _T_F64}
SCORE_STORAGE = (_T_I64, _T_I64, _T_I32, _T_STR, _T_STR, _T_STR, _T_STR, _T_F64, _T_STR, _T_STR, _T_STR, _T_BOOL,
                 _T_STR, _T_I64, _T_STR)
STORAGE = (*_BASE_STORAGE, *(_PROMOTED_STORAGE[_coercion(c)] for c in PROMOTED_COLUMNS), _T_BOOL, _T_STR,
           *(_T_I64 if c in conventions.TOKEN_COLUMNS else _T_STR for c in NULL_COLUMNS))


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
                     (EVALUATION_EVENT, "exception", conventions.DETAILS_EVENT), _PASS_LABELS, _FAIL_LABELS,
                     STORAGE, SCORE_STORAGE)


if _otlp_native is not None:
    _configure(_otlp_native)


@dataclass
class NativeDecoded(Decoded):
    """A native decode: the span and score columns as the C module's buffers. ``spans`` holds only the
    convention columns of the rows in ``tail_rows``, which the Python step filled, in row order; ``scores``
    the score rows the Python step made, each to go before the native score row ``score_inserts`` names."""

    rows: int = 0
    buffers: tuple[tuple[int, Any, Any, Any], ...] = ()
    tail_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    score_rows: int = 0
    score_buffers: tuple[tuple[int, Any, Any, Any], ...] = ()
    score_inserts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def span_count(self) -> int:
        return self.rows

    @property
    def score_count(self) -> int:
        return self.score_rows + len(self.scores["seq"])

    def span_table(self, schema: pa.Schema, *, consume: bool = False) -> pa.Table:
        """The spans as the store's Arrow table; ``consume`` lets go of the buffers and lists once converted."""
        arrays = [_array(schema.field(name).type, self.rows, spec) for name, spec in zip(COLUMNS, self.buffers,
                                                                                         strict=True)]
        by_name = dict(zip(COLUMNS, arrays, strict=True))
        if len(self.tail_rows):
            mask = np.zeros(self.rows, np.bool_)
            mask[self.tail_rows] = True
            mask_array = pa.array(mask)
            for name in TAIL_COLUMNS:
                python = pa.array(self.spans[name], schema.field(name).type)
                if len(python) != len(self.tail_rows):
                    raise RuntimeError(f"the Python step gave {len(python)} values of {name} for "
                                         f"{len(self.tail_rows)} spans")
                by_name[name] = pc.replace_with_mask(by_name[name], mask_array, python)
        if consume:
            self.buffers = ()
            for values in self.spans.values():
                values.clear()
        return pa.Table.from_arrays([by_name[name] for name in schema.names], schema=schema)

    def score_table(self, schema: pa.Schema, *, consume: bool = False) -> pa.Table:
        """The score rows as the store's Arrow table, in the reference's order."""
        arrays = {name: _array(schema.field(name).type, self.score_rows, spec)
                  for name, spec in zip(SCORE_COLUMNS, self.score_buffers, strict=True)}
        table = pa.Table.from_arrays([arrays[name] for name in schema.names], schema=schema)
        if len(self.score_inserts):
            python = pa.Table.from_arrays([pa.array(self.scores[name], schema.field(name).type)
                                           for name in schema.names], schema=schema)
            # Native row i sorts at i, a Python row just before the native row it names; a stable sort keeps
            # the Python rows of one span, and of consecutive spans, in their order.
            keys = np.concatenate([np.arange(self.score_rows, dtype=np.float64), self.score_inserts - 0.5])
            table = pa.concat_tables([table, python]).take(pa.array(np.argsort(keys, kind="stable")))
        if consume:
            self.score_buffers = ()
            for values in self.scores.values():
                values.clear()
        return table


_STORAGE = {pa.string(): _T_STR, pa.int64(): _T_I64, pa.uint64(): _T_I64, pa.float64(): _T_F64,
            pa.bool_(): _T_BOOL, pa.int32(): _T_I32}


def _array(arrow_type: pa.DataType, length: int, spec: tuple[int, Any, Any, Any]) -> pa.Array:
    nulls, validity, values, data = spec
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(values)]
    if data is not None:
        buffers.append(pa.py_buffer(data))
    return pa.Array.from_buffers(arrow_type, length, buffers, null_count=nulls)


def check_storage(spans: pa.Schema, scores: pa.Schema) -> None:
    """Refuse a store schema whose types the C module does not write (a column added to one side only)."""
    for schema, columns, storages in ((spans, COLUMNS, STORAGE), (scores, SCORE_COLUMNS, SCORE_STORAGE)):
        for name, storage in zip(columns, storages, strict=True):
            if _STORAGE.get(schema.field(name).type) != storage:
                raise TypeError(f"the native decoder writes {name} as storage {storage}, "
                                f"not {schema.field(name).type}")


def decode_protobuf(body: bytes) -> NativeDecoded:
    """As ``otlp_decode.decode_protobuf``; raises BadPayload for a body that is not an OTLP trace request.
    ``store.arrow_batch`` turns the result into the same tables as the reference's."""
    if _otlp_native is None:
        raise RuntimeError("the native decoder is not built: pip install -e . builds it")
    out = NativeDecoded()
    out.rejected, out.rows, out.buffers, tail, out.score_rows, out.score_buffers, inserts = _otlp_native.decode(
        body, out, out.errors, out.scores["seq"])
    out.tail_rows = np.frombuffer(tail, np.int64)
    out.score_inserts = np.frombuffer(inserts, np.int64)
    return out


def check_protobuf(body: bytes) -> Checked:
    """What ``decode_protobuf`` would report for ``body`` (its counts, its rejected spans' message) or the
    BadPayload it would raise, with the same walk of the wire but no column, resource or score row built: beyond
    the body it holds only the keys of the spans it accepts (16 bytes each, in a set at most 3/4 full, to refuse
    a repeat). Spans whose conventions only the Python step
    computes still go through it, into a scratch ``Decoded`` emptied after each (that step counts ``nulled``).
    Not counted in ``path_counts``."""
    if _otlp_native is None:
        raise RuntimeError("the native decoder is not built: pip install -e . builds it")
    scratch = Decoded()
    errors: list[str] = []
    lists = (*scratch.spans.values(), *scratch.scores.values())
    rejected, spans, scores = _otlp_native.check(body, scratch, errors, scratch.scores["seq"], lists, SHOWN_ERRORS)
    return Checked(spans, scores, rejected, scratch.nulled, tuple(errors))


def path_counts() -> dict[str, int]:
    """Spans decoded since import whose convention columns were computed natively, natively with a price from
    the table, and by the Python step."""
    return dict(_otlp_native.stats()) if _otlp_native is not None else {}


def protobuf_decoder() -> Callable[[bytes], Decoded]:
    """The decoder the daemon runs for OTLP/protobuf (HTTP and gRPC): this one when built, else the reference."""
    return decode_protobuf if AVAILABLE else otlp_decode.decode_protobuf


def protobuf_checker() -> Callable[[bytes], Checked]:
    """The check to run on an OTLP/protobuf body before acking it: ``check_protobuf`` when built, else the
    reference's (which decodes and drops the rows)."""
    return check_protobuf if AVAILABLE else otlp_decode.check_protobuf
