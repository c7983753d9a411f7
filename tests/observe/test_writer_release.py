"""The spool's room comes back by itself: a checkpoint that fails while the spool is at its bound is retried
while the loader is idle, so loaded segments are deleted and requests are admitted again without new traffic
(with nothing admitted no load would come to run the next checkpoint)."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.decode import otlp_native
from lousho.observe.metrics import Metrics
from lousho.observe.store.span_store import SpanStore
from lousho.observe.store.writer import QueueFull, Writer

SPANS = 40


class _FlakyCheckpoints(SpanStore):
    """A store whose checkpoints fail as a transient I/O error does, while ``failing`` is set (fault injection:
    a real I/O error cannot be had on demand)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, fold_thread=False)
        self.failing = True
        self.failed = 0

    def checkpoint(self, wait: bool = False) -> bool:
        if self.failing:
            self.failed += 1
            raise duckdb.IOException("Could not write file: Input/output error (injected)")
        return super().checkpoint(wait=wait)


def _body() -> bytes:
    return request([chat_span(*new_ids()) for _ in range(SPANS)]).SerializeToString()


def _send(writer: Writer, body: bytes) -> None:
    writer.submit(otlp_native.check_protobuf(body), len(body), body).result(10)


def _fill_spool(writer: Writer) -> int:
    """Send until the spool refuses; the requests acked."""
    acked = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            _send(writer, _body())
        except QueueFull:
            return acked
        acked += 1
    raise AssertionError("the spool never filled")


def test_a_failed_checkpoint_at_the_spools_bound_is_retried_and_requests_are_taken_again(tmp_path):
    store = _FlakyCheckpoints(tmp_path / "s.duckdb")
    writer = Writer(store, Metrics(), capacity_bytes=1 << 20, spool_bytes=100_000)
    try:
        acked = _fill_spool(writer)
        assert writer.wait_loaded(10) == 0
        assert store.failed >= 1  # the checkpoints after the loads failed: nothing was released
        store.failing = False  # the I/O error was transient; no request comes to trigger a load
        body = _body()
        deadline = time.monotonic() + 10
        while not writer.has_room(len(body)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert writer.has_room(len(body)), "the spool stayed full: every request would be refused"
        _send(writer, body)
        assert writer.wait_loaded(10) == 0
        count = store.reader().execute("SELECT count(*) FROM spans").fetchone()[0]
        assert count == (acked + 1) * SPANS
    finally:
        writer.close(10)
        store.close()
