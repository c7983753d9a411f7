"""Rows for the lake's tables made by hand, with every column a commit inserts."""

from __future__ import annotations

import pyarrow as pa

from lousho.observe.lake import lake_schema

KINDS = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(),
         "JSON": pa.string(), "INTEGER": pa.int32()}


def spans_table(daemon: int, n: int) -> pa.Table:
    """``n`` spans keyed (daemon + 1, 0..n-1), received at 1,000 + i ns."""
    columns: dict[str, pa.Array] = {"key_hi": pa.array([daemon + 1] * n, pa.uint64()),
                                    "key_lo": pa.array(range(n), pa.uint64())}
    required = {"trace_id": "t", "span_id": "s", "name": "n", "kind": "INTERNAL", "status_code": "OK"}
    for name, kind in lake_schema.SPAN_ROWS[1:]:
        if name == "received_ns":
            columns[name] = pa.array([1_000 + i for i in range(n)], pa.int64())
            continue
        value = required.get(name, 0 if kind == "BIGINT" else None)
        columns[name] = pa.array([value] * n, KINDS[kind])
    return pa.table(columns)


def scores_table(spans: pa.Table) -> pa.Table:
    """One passing score (seq 0) for each of ``spans``."""
    columns: dict[str, pa.Array] = {"key_hi": spans["key_hi"], "key_lo": spans["key_lo"]}
    for name, kind in lake_schema.SCORES[1:]:
        value = {"seq": 0, "trace_id": "t", "span_id": "s", "time_ns": 1, "passed": True}.get(name)
        columns[name] = pa.array([value] * spans.num_rows, KINDS[kind])
    return pa.table(columns)
