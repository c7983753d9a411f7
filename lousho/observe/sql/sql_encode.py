"""A SQL answer as JSON or CSV bytes, bounded while it is written, not after.

The Arrow rows a query returns are bounded (``--sql-query-memory``), but their text can be any multiple of them:
a column name is repeated in every JSON row object (``SELECT 1 AS "<4,000 characters>" FROM range(100000)`` is
400 KB of Arrow and 400 MB of JSON), so is a struct's field name in every value, and a NULL column has no Arrow
bytes at all yet a field in every row. Written whole and measured after, a 1 MiB query made the daemon hold
gigabytes. So the rows are written in slices of about ``SLICE_BYTES`` of text each (sized by ``text_bound``, an
upper bound computed in Arrow), and the answer is refused (``LOUSHO_SQL_OUT_OF_MEMORY``) as soon as the text
written passes the bound: the daemon holds at most the bound plus one slice (or one row, when a row alone is
bigger).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from lousho.observe.errors import SqlOutOfMemory
from lousho.observe.sql.query import QueryResult
from lousho.observe.sql.sql_csv import csv_text
from lousho.observe.sql.sql_json import row_keys, rows_json

SLICE_BYTES = 4 * 1024 * 1024
_HINT = "narrow the query (WHERE, fewer columns, LIMIT) or ask for Arrow"
# Upper bounds of one value's JSON text by Arrow type, a separator included ("-9223372036854775808,").
_FIXED = ((pa.types.is_null, 5), (pa.types.is_boolean, 6), (pa.types.is_integer, 21), (pa.types.is_floating, 26),
          (pa.types.is_decimal, 82), (pa.types.is_temporal, 48), (pa.types.is_interval, 96))


def json_answer(result: QueryResult, limit: int) -> bytes:
    """``{"columns", "keys", "rows", "truncated"}``, the rows as ``sql_json.rows_json`` writes them."""
    columns = result.table.column_names
    head = json.dumps({"columns": columns, "keys": row_keys(columns)}, ensure_ascii=False, separators=(",", ":"))
    pieces = [f'{head[:-1]},"rows":['.encode()]
    row_bytes = 2 + sum(len(json.dumps(k, ensure_ascii=False).encode()) + 2 for k in row_keys(columns))
    size = len(pieces[0])
    for part in _slices(result.table, lambda t: t.num_rows * row_bytes + text_bound(t)):
        text = rows_json(part)[1:-1].encode()
        size += len(text) + 1
        _check(size, limit)
        if len(pieces) > 1:
            pieces.append(b",")
        pieces.append(text)
    pieces.append(b'],"truncated":' + (b"true" if result.truncated else b"false") + b"}")
    return b"".join(pieces)


def csv_answer(result: QueryResult, limit: int) -> bytes:
    """A header of the column names, then the rows as ``sql_csv.csv_text`` writes them."""
    table = result.table
    pieces = [csv_text(table.slice(0, 0)).encode()]
    size = len(pieces[0])
    # A field is at most twice its JSON text (quotes doubled) and its quotes.
    for part in _slices(table, lambda t: 2 * text_bound(t) + t.num_rows * (1 + 2 * t.num_columns)):
        text = csv_text(part, header=False).encode()
        size += len(text)
        _check(size, limit)
        pieces.append(text)
    return b"".join(pieces)


def _check(size: int, limit: int) -> None:
    if size > limit:
        raise SqlOutOfMemory(f"the encoded answer passed the {limit} bytes one query may hold", hint=_HINT)


def _slices(table: pa.Table, bound: Callable[[pa.Table], int]):
    """``table`` in consecutive slices whose ``bound`` is at most ``SLICE_BYTES`` (or of one row)."""
    start, rows = 0, 1024
    while start < table.num_rows:
        rows = min(rows, table.num_rows - start)
        part = table.slice(start, rows)
        estimate = bound(part)
        while rows > 1 and estimate > SLICE_BYTES:
            rows //= 2
            part = table.slice(start, rows)
            estimate = bound(part)
        yield part
        start += rows
        if estimate * 2 <= SLICE_BYTES:
            rows *= 2


def text_bound(data: pa.Table | pa.ChunkedArray | pa.Array) -> int:
    """An upper bound on the bytes of JSON text of the values in ``data`` (row objects' keys not included)."""
    if isinstance(data, pa.Table):
        return sum(text_bound(column) for column in data.columns)
    if isinstance(data, pa.ChunkedArray):
        return sum(text_bound(chunk) for chunk in data.chunks)
    n = len(data)
    t = data.type
    if n == 0:
        return 0
    if isinstance(t, pa.ExtensionType):
        return text_bound(data.storage)
    if pa.types.is_dictionary(t):
        return text_bound(data.dictionary_decode())
    for test, each in _FIXED:
        if test(t):
            return n * each
    if pa.types.is_fixed_size_binary(t):
        return n * (6 * t.byte_width + 3)
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)):
        # An escaped byte is at most six ("\u0001"); base64 is 4/3 of a byte.
        data_bytes = pc.sum(pc.binary_length(data)).as_py() or 0
        return 6 * data_bytes + 5 * n
    if pa.types.is_struct(t):
        names = sum(len(json.dumps(t.field(i).name, ensure_ascii=False).encode()) + 2 for i in range(t.num_fields))
        return n * (names + 6) + sum(text_bound(child) for child in data.flatten())
    if pa.types.is_map(t):
        # Written [{"key":k,"value":v}, ...]; a slice's keys and items are those between its first and last offset.
        first, last = data.offsets[0].as_py(), data.offsets[-1].as_py()
        keys, items = data.keys.slice(first, last - first), data.items.slice(first, last - first)
        return n * 6 + len(keys) * 20 + text_bound(keys) + text_bound(items)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        items = data.flatten()
        return n * 6 + len(items) + text_bound(items)
    # Anything else (a union): its value is one of its members; bounded by all of them, generously.
    return n * 64 + 6 * data.nbytes
