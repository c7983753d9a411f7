"""A loader behind by more than one of DuckDB's row groups loads at least a row group at once: DuckDB then writes
the rows straight to the database file, compressed, and its WAL gets only their place. Smaller loads wrote every
row to the WAL (480-730 bytes a span) and again at the checkpoint."""

from __future__ import annotations

from gated_store_support import GatedStore
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.decode import otlp_native
from lousho.observe.metrics import Metrics
from lousho.observe.store.span_store import ROW_GROUP_ROWS, SpanStore, arrow_batch
from lousho.observe.store.writer import MAX_BATCH_SPANS, Writer

SPANS_PER_BODY = 512
# The first body is the loader's first load, held at the gate; the rest queue behind it: a full load, and one more.
BODIES = 1 + MAX_BATCH_SPANS // SPANS_PER_BODY + 1


def _bodies(count: int = BODIES) -> list[bytes]:
    trace_id = new_ids()[0]
    req = request([chat_span(trace_id, new_ids()[1]) for _ in range(SPANS_PER_BODY)])
    spans = req.resource_spans[0].scope_spans[0].spans
    bodies = []
    for _ in range(count):
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


def test_the_store_is_written_in_its_own_row_groups(tmp_path):
    """A load of one of the store's row groups skips the WAL, though DuckDB's own row group is 7.5 times as large;
    the next load, one body short of a row group, goes through it. Readers and the store's catalog (the file's
    stem) are as before."""
    path = tmp_path / "small-groups.duckdb"
    wal = path.with_name(path.name + ".wal")
    store = SpanStore(path, fold_thread=False)
    try:
        bodies = [arrow_batch(otlp_native.protobuf_decoder()(body))
                  for body in _bodies(2 * ROW_GROUP_ROWS // SPANS_PER_BODY - 1)]
        for load in (bodies[:ROW_GROUP_ROWS // SPANS_PER_BODY], bodies[ROW_GROUP_ROWS // SPANS_PER_BODY:]):
            before = wal.stat().st_size if wal.exists() else 0
            spans = store.append(load).inserted
            added = wal.stat().st_size - before
            assert (added < 50 * spans) == (spans >= ROW_GROUP_ROWS), (spans, added)
        reader = store.reader()
        assert reader.execute("SELECT count(*) FROM spans").fetchone()[0] == len(bodies) * SPANS_PER_BODY
        assert reader.execute("SELECT current_database()").fetchone()[0] == "small-groups"
    finally:
        store.close()
