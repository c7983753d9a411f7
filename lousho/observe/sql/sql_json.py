"""A SQL result as JSON: one documented answer for every DuckDB type (docs/observe.md, "The SQL API").

Mapping (Arrow type of the result, as ``sql.run_query`` makes it):

- booleans, integers up to 64 bits, finite floats: JSON booleans and numbers; NaN and infinite
  floats: the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
- DECIMAL (and HUGEINT, UHUGEINT, BIGNUM, which ``run_query`` sends as text): a decimal string, exact;
- VARCHAR, UUID, JSON, ENUM: strings; BLOB: base64;
- DATE, TIMESTAMP (any unit, with or without zone): ISO-8601 strings, infinite ones ``"infinity"``
  and ``"-infinity"``; TIME: ``"HH:MM:SS.ffffff"``;
- INTERVAL: ``{"months": m, "days": d, "micros": us}`` (DuckDB keeps the three apart);
- LIST and ARRAY: arrays; STRUCT: objects; MAP: arrays of ``{"key": k, "value": v}`` (keys may be
  any type and repeat in order); UNION: the value of its active member.

Duplicate column names stay in ``columns`` as given; each row object uses ``keys`` (the name, then
``name_2``, ``name_3``... for repeats), so no value is lost.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lousho.observe.errors import SqlUnsupportedType

if TYPE_CHECKING:
    import polars as pl

# DuckDB's infinite TIMESTAMP and DATE reach Arrow as the largest magnitudes of int64 and int32.
_TS_INFINITY = 2**63 - 1
_DATE_INFINITY = 2**31 - 1
_UNIT_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 1}


def row_keys(columns: list[str]) -> list[str]:
    """One unique key per column, in order: the name, or ``name_2``... when it repeats."""
    keys: list[str] = []
    taken: set[str] = set()
    for name in columns:
        key, n = name, 1
        while key in taken:
            n += 1
            key = f"{name}_{n}"
        taken.add(key)
        keys.append(key)
    return keys


def rows_json(table: pa.Table) -> str:
    """The JSON array of row objects (keyed by ``row_keys``), per the mapping above.

    Results of plain columns (integers, text, booleans, finite floats, decimals, in-range dates and
    timestamps) are converted column-wise in Arrow and written by Polars, out of Python: a million
    rows take a second, not ten, and hold the GIL (which ingest shares) far less. Anything else
    goes value by value. Both give the same JSON (tests/observe/test_sql_json.py).
    """
    if table.num_rows == 0:
        return "[]"
    frame = plain_frame(table)
    if frame is not None:
        return frame.write_json()
    keys = row_keys(table.column_names)
    rows = [dict(zip(keys, row, strict=True)) for row in table_rows(table)]
    return json.dumps(rows, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def plain_frame(table: pa.Table) -> pl.DataFrame | None:
    """The table already mapped to JSON-native columns (named by ``row_keys``), when every column
    maps by a vectorised cast; None when some column needs the value-by-value path."""
    plain = [_plain_json_column(table.column(i)) for i in range(table.num_columns)]
    if not plain or any(column is None for column in plain):
        return None
    # Polars loads at the first answer it writes, not at the daemon's start (a tenth of a second).
    import polars as pl

    frame = pl.from_arrow(pa.table(plain, names=row_keys(table.column_names)))
    assert isinstance(frame, pl.DataFrame)
    return frame


# Years 1..9999 (where Arrow's own text matches ours), in days and in microseconds since 1970-01-01.
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896
_DAY_UNITS = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def _plain_json_column(column: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """The column as JSON-native Arrow (int, bool, string, float64) when its mapping is a plain
    vectorised cast; None when it needs the value-by-value path."""
    t = column.type
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
        return column
    if pa.types.is_floating(t):
        as_double = column.cast(pa.float64())
        finite = pc.all(pc.is_finite(as_double)).as_py()
        return as_double if finite is not False else None
    if pa.types.is_decimal(t):
        # Arrow writes small values in exponent form ("1E-10"); those take the exact path.
        text = column.cast(pa.string())
        return None if pc.any(pc.match_substring(text, "E")).as_py() else text
    if pa.types.is_date32(t):
        if not _within(column.cast(pa.int32()), _MIN_DAY, _MAX_DAY):
            return None
        return column.cast(pa.string())
    if pa.types.is_timestamp(t):
        per_day = _DAY_UNITS[t.unit]
        if not _within(column.cast(pa.int64()), _MIN_DAY * per_day, (_MAX_DAY + 1) * per_day - 1):
            return None
        # Arrow's cast writes "YYYY-MM-DD HH:MM:SS[.fraction]" (3x faster than its strftime).
        text = pc.replace_substring(column.cast(pa.timestamp(t.unit)).cast(pa.string()), " ", "T",
                                    max_replacements=1)
        return pc.binary_join_element_wise(text, "Z", "") if t.tz else text
    return None


def _within(values: pa.ChunkedArray, low: int, high: int) -> bool:
    bounds = pc.min_max(values)
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    return lo is None or (lo >= low and hi <= high)


def table_rows(table: pa.Table) -> list[list[Any]]:
    """The table's rows as lists of JSON-ready values, in column order."""
    columns = [column_values(name, table.column(i)) for i, name in enumerate(table.column_names)]
    return [list(row) for row in zip(*columns, strict=True)] if columns else [[] for _ in range(table.num_rows)]


def column_values(name: str, column: pa.ChunkedArray | pa.Array) -> list[Any]:
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    convert = _converter(column.type, name)
    values: list[Any] = []
    for chunk in chunks:
        values.extend(convert(chunk))
    return values


def _converter(t: pa.DataType, name: str) -> Callable[[pa.Array], list[Any]]:
    if pa.types.is_null(t):
        return lambda a: [None] * len(a)
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_string(t) or \
            pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return lambda a: a.to_pylist()
    if pa.types.is_floating(t):
        return lambda a: [_float(v) for v in a.cast(pa.float64()).to_pylist()]
    if pa.types.is_decimal(t):
        return lambda a: [None if v is None else _decimal(v) for v in a.to_pylist()]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or \
            pa.types.is_binary_view(t):
        return lambda a: [None if v is None else base64.b64encode(v).decode() for v in a.to_pylist()]
    if pa.types.is_date32(t):
        return lambda a: [_date(v) for v in a.view(pa.int32()).to_pylist()]
    if pa.types.is_date64(t):
        return lambda a: [None if v is None else v.isoformat() for v in a.to_pylist()]
    if pa.types.is_timestamp(t):
        return _timestamps(t)
    if pa.types.is_time(t):
        return _times(t)
    if t == pa.month_day_nano_interval():
        return lambda a: [None if v is None else {"months": v.months, "days": v.days, "micros": v.nanoseconds // 1000}
                          for v in a.to_pylist()]
    if pa.types.is_duration(t):
        return lambda a: [None if v is None else {"months": 0, "days": 0, "micros": v * _UNIT_MICROS[t.unit]
                                                  if t.unit != "ns" else v // 1000}
                          for v in a.view(pa.int64()).to_pylist()]
    if pa.types.is_dictionary(t):
        inner = _converter(t.value_type, name)
        return lambda a: inner(a.dictionary.take(a.indices))
    if pa.types.is_map(t):
        return _maps(t, name)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or \
            pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return _lists(t, name)
    if pa.types.is_struct(t):
        return _structs(t, name)
    if pa.types.is_union(t):
        return _unions(t, name)
    if isinstance(t, pa.BaseExtensionType):
        storage = _converter(t.storage_type, name)
        return lambda a: storage(a.storage)
    raise SqlUnsupportedType(f"column {name!r} has type {t}, which has no JSON form here",
                             hint=f"cast it in the query, e.g. {name}::VARCHAR")


def _float(v: float | None) -> float | str | None:
    if v is None or math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"


def _decimal(v: Decimal) -> str:
    # Exact as text; str(Decimal) would switch to exponent form for large scales.
    return format(v, "f")


def _date(days: int | None) -> str | None:
    if days is None:
        return None
    if abs(days) == _DATE_INFINITY:
        return "infinity" if days > 0 else "-infinity"
    return _civil(days)


def _civil(days: int) -> str:
    """Days since 1970-01-01 as an ISO date, proleptic Gregorian, for any year (DuckDB's dates span
    about 5.9 million years; Python's stop at 9999). Astronomical years: 0 is 1 BC, -1 is 2 BC."""
    # Howard Hinnant's days_from_civil inverse, exact integer arithmetic.
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    return f"{'-' if year < 0 else ''}{abs(year):04d}-{month:02d}-{day:02d}"


def _timestamps(t: pa.TimestampType) -> Callable[[pa.Array], list[Any]]:
    per_unit = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[t.unit]
    digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[t.unit]
    zone = "Z" if t.tz else ""

    def text(v: int) -> str:
        days, rest = divmod(v, 86_400 * per_unit)
        seconds, fraction = divmod(rest, per_unit)
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return f"{_civil(days)}T{clock}{f'.{fraction:0{digits}d}' if digits else ''}{zone}"

    def convert(a: pa.Array) -> list[Any]:
        return [None if v is None else ("infinity" if v > 0 else "-infinity") if abs(v) == _TS_INFINITY
                else text(v) for v in a.view(pa.int64()).to_pylist()]
    return convert


def _times(t: pa.DataType) -> Callable[[pa.Array], list[Any]]:
    per_micro = {"s": 1_000_000, "ms": 1_000, "us": 1}

    def convert(a: pa.Array) -> list[Any]:
        raw = a.view(pa.int64() if pa.types.is_time64(t) else pa.int32()).to_pylist()
        out: list[Any] = []
        for v in raw:
            if v is None:
                out.append(None)
                continue
            micros, nanos = (divmod(v, 1000) if t.unit == "ns" else (v * per_micro[t.unit], 0))
            seconds, micro = divmod(micros, 1_000_000)
            text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micro:06d}"
            out.append(text + (f"{nanos:03d}" if t.unit == "ns" else ""))
        return out
    return convert


def _lists(t: pa.DataType, name: str) -> Callable[[pa.Array], list[Any]]:
    inner = _converter(t.value_type, name)

    def convert(a: pa.Array) -> list[Any]:
        if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
            a = a.cast(pa.large_list(t.value_type))
        # ``values`` is the whole child, unsliced; the offsets index into it.
        flat = inner(a.values)
        offsets = a.offsets.to_pylist() if not pa.types.is_fixed_size_list(t) else \
            [(a.offset + i) * t.list_size for i in range(len(a) + 1)]
        valid = a.is_valid().to_pylist()
        return [flat[offsets[i]: offsets[i + 1]] if valid[i] else None for i in range(len(a))]
    return convert


def _structs(t: pa.StructType, name: str) -> Callable[[pa.Array], list[Any]]:
    fields = [t.field(i) for i in range(t.num_fields)]
    converters = [_converter(f.type, f"{name}.{f.name}") for f in fields]

    def convert(a: pa.Array) -> list[Any]:
        children = [c(child) for c, child in zip(converters, a.flatten(), strict=True)]
        valid = a.is_valid().to_pylist()
        return [{f.name: children[j][i] for j, f in enumerate(fields)} if valid[i] else None
                for i in range(len(a))]
    return convert


def _maps(t: pa.MapType, name: str) -> Callable[[pa.Array], list[Any]]:
    keys = _converter(t.key_type, f"{name}.key")
    items = _converter(t.item_type, f"{name}.value")

    def convert(a: pa.Array) -> list[Any]:
        # The whole entries child, unsliced; the offsets index into it.
        entries = a.values
        flat_keys, flat_items = keys(entries.field(0)), items(entries.field(1))
        offsets = a.offsets.to_pylist()
        valid = a.is_valid().to_pylist()
        return [[{"key": flat_keys[j], "value": flat_items[j]}
                 for j in range(offsets[i], offsets[i + 1])] if valid[i] else None
                for i in range(len(a))]
    return convert


def _unions(t: pa.UnionType, name: str) -> Callable[[pa.Array], list[Any]]:
    converters = [_converter(t.field(i).type, f"{name}.{t.field(i).name}") for i in range(t.num_fields)]
    code_index = {code: i for i, code in enumerate(t.type_codes)}

    def convert(a: pa.Array) -> list[Any]:
        children = [converters[i](a.field(i)) for i in range(t.num_fields)]
        codes = a.type_codes.to_pylist()
        dense = t.mode == "dense"
        offsets = a.offsets.to_pylist() if dense else None
        out: list[Any] = []
        for i, code in enumerate(codes):
            child = code_index[code]
            out.append(children[child][offsets[i] if offsets is not None else i])
        return out
    return convert
