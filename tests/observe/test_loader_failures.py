"""The loader survives any failure of one load: it retries the same requests (acked: never skipped for a
failure that is not their fault), stores each once, and if its thread ever ends /healthz says so.

The failures are injected by stores whose methods raise (fault injection: an out-of-memory or a full disk
at a chosen call cannot be had on demand); the Writer, the spool and DuckDB are real."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from otlp_bodies import chat_span, new_ids, request
from starlette.testclient import TestClient

from lousho.observe.config import DaemonConfig
from lousho.observe.decode import otlp_native
from lousho.observe.errors import StoreDiskFull
from lousho.observe.metrics import Metrics
from lousho.observe.receive.http_app import build_app
from lousho.observe.store.span_store import AppendResult, SpanStore
from lousho.observe.store.writer import Writer

SPANS = 20


class _FailingStore(SpanStore):
    """A store whose next ``appends`` appends raise ``error`` (then it works), and whose next ``marks``
    ``mark_spool_position`` calls raise a full disk."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, fold_thread=False)
        self.error: BaseException = MemoryError()
        self.appends = 0
        self.marks = 0

    def append(self, batches, spool_seq=None) -> AppendResult:  # noqa: ANN001 (the base's signature)
        if self.appends:
            self.appends -= 1
            raise self.error
        return super().append(batches, spool_seq=spool_seq)

    def mark_spool_position(self, spool_seq: int) -> None:
        if self.marks:
            self.marks -= 1
            raise StoreDiskFull("the disk is full (injected)")
        super().mark_spool_position(spool_seq)


@pytest.fixture
def store(tmp_path):
    store = _FailingStore(tmp_path / "s.duckdb")
    yield store
    store.close()


def _send(writer: Writer) -> None:
    body = request([chat_span(*new_ids()) for _ in range(SPANS)]).SerializeToString()
    writer.submit(otlp_native.check_protobuf(body), len(body), body).result(10)


def _stored_once(store: SpanStore, requests: int) -> None:
    count, distinct = store.reader().execute("SELECT count(*), count(DISTINCT span_id) FROM spans").fetchone()
    assert (count, distinct) == (requests * SPANS, requests * SPANS)


@pytest.mark.parametrize("error", [MemoryError(), pa.ArrowMemoryError("injected"),
                                   duckdb.OutOfMemoryException("injected")], ids=type)
def test_out_of_memory_at_a_load_is_retried_and_skips_no_acked_request(store, error):
    metrics = Metrics()
    writer = Writer(store, metrics, capacity_bytes=1 << 20)
    try:
        store.error, store.appends = error, 3  # the load, then each request alone: none is the data's fault
        for _ in range(3):
            _send(writer)
        assert writer.wait_loaded(20) == 0
        _stored_once(store, 3)
        assert metrics.spool_unloadable == 0
    finally:
        writer.close(10)


def test_a_failure_while_recording_a_skip_does_not_end_the_loader(store):
    metrics = Metrics()
    writer = Writer(store, metrics, capacity_bytes=1 << 20)
    try:
        _send(writer)
        assert writer.wait_loaded(10) == 0
        # The load fails as the data's fault would, then alone too; recording the skip finds the disk full.
        store.error, store.appends, store.marks = duckdb.ConversionException("injected"), 2, 1
        _send(writer)
        _send(writer)  # acked behind it: loaded only if the loader lives on
        assert writer.wait_loaded(20) == 0
        _stored_once(store, 3)  # the retry stored the request whose skip could not be recorded
        assert metrics.loader_stopped is None
    finally:
        writer.close(10)


def test_healthz_reports_a_loader_that_stopped(store):
    metrics = Metrics()
    writer = Writer(store, metrics, capacity_bytes=1 << 20)
    try:
        store.error, store.appends = SystemExit(3), 1  # ends the thread: nothing a retry can survive
        _send(writer)
        writer.wait_loaded(2)
        app = build_app(DaemonConfig(), writer, metrics, store.reader)
        with TestClient(app, base_url="http://127.0.0.1:4318") as client:
            reply = client.get("/healthz")
        assert reply.status_code == 503
        assert reply.json()["code"] == "LOUSHO_OBSERVE_LOADER_STOPPED"
        assert "lousho_loader_stopped 1" in metrics.render()
    finally:
        writer.close(1)
