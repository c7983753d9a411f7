"""Decoding ahead of a slow loader stays within a window of one load (the next): decoded rows take 2-19x their
body's bytes while the queue counts the body's, so decoding the whole queue held several times the memory
budget. Past the window bodies stay bodies, and are decoded as the loader comes near them."""

from __future__ import annotations

from concurrent.futures import Future

from gated_store_support import GatedStore
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.decode import otlp_native
from lousho.observe.metrics import Metrics
from lousho.observe.store.writer import DECODE_AHEAD_WINDOW_LOADS, MAX_BATCH_SPANS, Writer

SPANS = 400
WINDOW_SPANS = DECODE_AHEAD_WINDOW_LOADS * MAX_BATCH_SPANS
REQUESTS = 3 * WINDOW_SPANS // SPANS  # the queue three windows long


def _decoded_ahead(writer: Writer) -> tuple[int, int]:
    """Items queued behind the loader that the decode thread holds (or will hold) rows for, and their spans
    as the loads count them. Read from the queue: what the bound is about."""
    with writer._cond:
        ahead = [item for item in writer._queue if isinstance(item.batch, Future)]
    return len(ahead), sum(item.spans for item in ahead)


def _everything_loads_once_the_gate_opens(store: GatedStore, writer: Writer) -> None:
    store.gate.set()
    assert writer.wait_loaded(60) == 0
    assert store.reader().execute("SELECT count(*) FROM spans").fetchone()[0] == SPANS


def test_decoding_ahead_of_a_slow_store_stays_within_its_window(tmp_path):
    store = GatedStore(tmp_path / "s.duckdb")
    writer = Writer(store, Metrics(), capacity_bytes=1 << 30, spool_bytes=1 << 30)
    try:
        trace_id = new_ids()[0]
        body = request([chat_span(trace_id, new_ids()[1]) for _ in range(SPANS)]).SerializeToString()
        for _ in range(REQUESTS):  # the same spans again and again: stored once, which is not the point here
            writer.submit(otlp_native.check_protobuf(body), len(body), body).result(10)
        items, spans = _decoded_ahead(writer)
        assert items > 0  # under load it does decode ahead
        assert items < REQUESTS // 2  # and not the whole queue
        assert spans <= WINDOW_SPANS, f"{items} requests decoded ahead"
        _everything_loads_once_the_gate_opens(store, writer)
    finally:
        store.gate.set()
        writer.close(30)
        store.close()


def test_bodies_kept_on_disk_only_are_read_back_and_decoded_ahead_too(tmp_path):
    # Past the memory budget a body is spilled: only the spool holds it. Near the loader it is read back and
    # decoded ahead like the others, not by the loader between its inserts.
    store = GatedStore(tmp_path / "s.duckdb")
    trace_id = new_ids()[0]
    body = request([chat_span(trace_id, new_ids()[1]) for _ in range(SPANS)]).SerializeToString()
    metrics = Metrics()
    writer = Writer(store, metrics, capacity_bytes=4 * len(body), spool_bytes=1 << 30)
    try:
        for _ in range(REQUESTS):
            writer.submit(otlp_native.check_protobuf(body), len(body), body).result(10)
        assert metrics.spool_spilled > REQUESTS // 2
        items, spans = _decoded_ahead(writer)
        assert items > 4  # more than the bodies the budget kept in memory
        assert spans <= WINDOW_SPANS, f"{items} requests decoded ahead"
        _everything_loads_once_the_gate_opens(store, writer)
    finally:
        store.gate.set()
        writer.close(30)
        store.close()
