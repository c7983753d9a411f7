"""A loader behind by more than one of DuckDB's row groups loads at least a row group at once: DuckDB then writes
the rows straight to the database file, compressed, and its WAL gets only their place. Smaller loads wrote every
row to the WAL (480-730 bytes a span) and again at the checkpoint."""

from __future__ import annotations

from gated_store_support import GatedStore
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.decode import otlp_native
from lousho.observe.metrics import Metrics
from lousho.observe.store.writer import MAX_BATCH_SPANS, ROW_GROUP_ROWS, Writer

SPANS_PER_BODY = 512
# The first body is the loader's first load, held at the gate; the rest queue behind it: a full load, and one more.
BODIES = 1 + MAX_BATCH_SPANS // SPANS_PER_BODY + 1


def _bodies() -> list[bytes]:
    trace_id = new_ids()[0]
    req = request([chat_span(trace_id, new_ids()[1]) for _ in range(SPANS_PER_BODY)])
    spans = req.resource_spans[0].scope_spans[0].spans
    bodies = []
    for _ in range(BODIES):
        trace_id = new_ids()[0]
        for span in spans:
            span.trace_id, span.span_id = trace_id, new_ids()[1]
        bodies.append(req.SerializeToString())
    return bodies


def test_a_backlog_loads_in_row_groups_that_skip_the_wal(tmp_path):
    store = GatedStore(tmp_path / "s.duckdb")
    writer = Writer(store, Metrics(), capacity_bytes=1 << 30, spool_bytes=1 << 30)
    try:
        first, *rest = _bodies()
        writer.submit(otlp_native.check_protobuf(first), len(first), first).result(10)
        assert store.entered.wait(10)  # however fast the rest come, they queue behind this load
        for body in rest:
            writer.submit(otlp_native.check_protobuf(body), len(body), body).result(10)
        store.gate.set()
        assert writer.wait_loaded(120) == 0
        total = BODIES * SPANS_PER_BODY
        assert sum(spans for spans, _ in store.loads) == total
        full = [(spans, wal) for spans, wal in store.loads if spans >= ROW_GROUP_ROWS]
        assert full, store.loads  # the backlog went in a row group or more at once
        for spans, wal in store.loads:
            # A row group's rows go to the database file: a few WAL bytes a span, where a smaller load's go whole.
            assert (wal < 50 * spans) == (spans >= ROW_GROUP_ROWS), store.loads
        assert store.reader().execute("SELECT count(*) FROM spans").fetchone()[0] == total
    finally:
        store.gate.set()
        writer.close(30)
        store.close()
