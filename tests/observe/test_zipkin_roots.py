"""Span keys whose two halves are equal: the root span of every trace begun with a 64-bit id (Zipkin's B3 gives
the root the trace's id, and OTLP's 128-bit trace id has a zero high half), or a body made so on purpose.

DuckDB hashes a UHUGEINT as hash(upper) XOR hash(lower): hashed whole, all such keys fall in one bucket and every
join, DISTINCT and IN over them costs the square of their number. The fold and the compaction hash the key's halves
(runs/span_key_sql.py). Before, these 60,000 roots took about 8 s to fold and about 30 s to compact at the store's
next open (one ``IN`` over them); now about 2 s and under 1 s."""

from __future__ import annotations

import time

from opentelemetry.proto.trace.v1.trace_pb2 import Span
from otlp_bodies import NS, request

from lousho.observe.decode.otlp_decode import decode_request
from lousho.observe.store.span_store import SpanStore, open_read_only

ROOTS = 60_000


def _zipkin_roots(count: int, first: int) -> list[Span]:
    spans = []
    for n in range(first, first + count):
        trace64 = n.to_bytes(8, "big")
        spans.append(Span(trace_id=bytes(8) + trace64, span_id=trace64, name="GET /orders",
                          kind=Span.SPAN_KIND_SERVER, start_time_unix_nano=NS + n, end_time_unix_nano=NS + n + 1000))
    return spans


def test_roots_keyed_by_their_trace_fold_and_compact_in_linear_time(tmp_path):
    path = tmp_path / "zipkin.duckdb"
    store = SpanStore(path, fold_thread=False)
    try:
        store.append([decode_request(request(_zipkin_roots(ROOTS, 1), service="zipkin-app"))])
        started = time.perf_counter()
        assert store.fold() == ROOTS
        fold_s = time.perf_counter() - started
    finally:
        store.close()
    started = time.perf_counter()
    store = SpanStore(path, fold_thread=False)  # compacts the spans committed since its last check
    open_s = time.perf_counter() - started
    store.close()
    con = open_read_only(path)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT trace_id) FROM spans").fetchall() == [(ROOTS, ROOTS)]
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(ROOTS,)]
    finally:
        con.close()
    # Bounds far above the linear cost (2-3 s on two busy cores) and far below the quadratic one (8 s and 30 s).
    assert fold_s < 6, f"folding {ROOTS:,} roots took {fold_s:.1f} s"
    assert open_s < 10, f"opening (compacting) took {open_s:.1f} s"
