"""A full disk is retryable, never corruption: 503 while full, back by itself when room returns, no span lost.

The store and its spool live on a tmpfs the test mounts (root only; skipped with the reason otherwise) and
fill with a ballast file. The spool's write that finds no room fails its request alone (never acked); the
store's (a commit that finds no room for its WAL, or a checkpoint, which invalidates the database:
store_damage.py) leaves the acked requests in the spool, loaded once there is room.
"""

from __future__ import annotations

import os
import time

import grpc
import pytest
from daemon_support import get, metric, post, sql
from disk_support import fill_disk, tmpfs
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon
from lousho.observe.decode.otlp_decode import decode_request
from lousho.observe.errors import StoreDiskFull
from lousho.observe.store.span_store import SpanStore, open_read_only

PROTOBUF = "application/x-protobuf"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs(tmp_path / "disk") as mount:
        yield mount


def _body(spans: int = 100, value_bytes: int = 10_000) -> tuple[bytes, list[str]]:
    trace_id = new_ids()[0]
    batch = [chat_span(trace_id, new_ids()[1], **{"gen_ai.input.messages": os.urandom(value_bytes // 2).hex()})
             for _ in range(spans)]
    return request(batch).SerializeToString(), [s.span_id.hex() for s in batch]


def _health_becomes(url: str, status: str, within: float = 30.0) -> dict:
    deadline = time.monotonic() + within
    while True:
        reply = get(url, "/healthz")
        doc = reply.json()
        if doc["status"] == status or time.monotonic() > deadline:
            return {"http": reply.status, **doc}
        time.sleep(0.1)




def _spool_empties(url: str) -> None:
    """Wait for the loaded segments to go (after the loader's checkpoint): the spool then takes any one body.
    The loader checkpoints for the spool once a quarter of it is loaded, so the bodies before must add up to
    more than that."""
    deadline = time.monotonic() + 30
    while metric(url, "lousho_spool_bytes") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(url, "lousho_spool_bytes") == 0


def test_a_checkpoint_that_found_the_disk_full_is_recovered_from_by_opening_the_store_again(small_disk):
    # A checkpoint that finds no room invalidates the database with an I/O error, not a fatal one, and a bare
    # SELECT 1 still answers on it. Taken as usable, the store declared itself recovered and failed its next
    # commit, again and again (the daemon's disk-full count climbed while it flapped).
    store = SpanStore(small_disk / "s.duckdb", fold_thread=False)
    try:
        body, ids = _body(spans=40, value_bytes=2000)
        store.append([decode_request(ExportTraceServiceRequest.FromString(body))])
        fill_disk(small_disk / "ballast", leave=0)
        with pytest.raises(StoreDiskFull):
            store.checkpoint(wait=True)
        (small_disk / "ballast").unlink()
        assert store.recover()
        more, more_ids = _body(spans=5, value_bytes=200)
        assert store.append([decode_request(ExportTraceServiceRequest.FromString(more))]).inserted == 5
        stored = {row[0] for row in store.reader().execute("SELECT span_id FROM spans").fetchall()}
        assert stored == set(ids) | set(more_ids)
    finally:
        store.close()


@pytest.mark.system
def test_a_full_disk_answers_503_heals_without_restart_and_loses_no_acked_span(small_disk):
    db = small_disk / "observe.duckdb"
    ballast = small_disk / "ballast"
    # A small spool: each load is followed by a checkpoint (a segment goes only after one), so the store
    # writes its file, not only its WAL, while the disk fills.
    daemon = start_daemon(db, "--spool-mib", "0.25")
    acked: list[str] = []
    try:
        body, ids = _body(spans=40, value_bytes=2000)  # 80 KB: past a quarter of the spool, so a checkpoint
        assert post(daemon.url, "/v1/traces", body, PROTOBUF).status == 200
        acked += ids

        # 1. The spool finds no room: the request is refused, retryable, and nothing acked is touched.
        _spool_empties(daemon.url)
        fill_disk(ballast, leave=0)
        big, big_ids = _body(spans=50, value_bytes=2000)
        full = post(daemon.url, "/v1/traces", big, PROTOBUF)
        assert full.status == 503 and full.headers.get("retry-after"), full
        assert b"LOUSHO_STORE_DISK_FULL" in full.body
        health = _health_becomes(daemon.url, "degraded")
        assert health["http"] == 503 and health.get("reason") == "disk full", health
        assert health["code"] == "LOUSHO_STORE_DISK_FULL", health
        with grpc.insecure_channel(daemon.grpc_target) as channel:
            export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
            with pytest.raises(grpc.RpcError) as unavailable:
                export(big, timeout=10)
        assert unavailable.value.code() == grpc.StatusCode.UNAVAILABLE, unavailable.value
        assert metric(daemon.url, "lousho_store_disk_full") == 1
        assert metric(daemon.url, "lousho_store_corrupt") == 0
        # Room again: the daemon resumes by itself, before any export asks it to.
        ballast.unlink()
        assert _health_becomes(daemon.url, "ok")["http"] == 200
        assert post(daemon.url, "/v1/traces", big, PROTOBUF).status == 200
        acked += big_ids

        # 2. Room for the spool but not for the store (its WAL or its checkpoint): what was acked waits in the
        # spool and is loaded once there is room; new requests are refused meanwhile.
        _spool_empties(daemon.url)
        fill_disk(ballast, leave=256 * 1024)
        refusals = 0
        for _ in range(50):
            if get(daemon.url, "/healthz").status != 200:
                break
            small, small_ids = _body(spans=5, value_bytes=2000)
            if post(daemon.url, "/v1/traces", small, PROTOBUF).status == 200:
                acked += small_ids
            else:
                refusals += 1
            time.sleep(0.05)
        health = _health_becomes(daemon.url, "degraded")
        assert health["http"] == 503 and health["code"] == "LOUSHO_STORE_DISK_FULL", health
        refused_body, refused_ids = _body(spans=10)
        assert post(daemon.url, "/v1/traces", refused_body, PROTOBUF).status == 503
        ballast.unlink()
        assert _health_becomes(daemon.url, "ok")["http"] == 200
        assert post(daemon.url, "/v1/traces", refused_body, PROTOBUF).status == 200
        acked += refused_ids

        assert metric(daemon.url, "lousho_store_disk_full") == 0
        assert metric(daemon.url, "lousho_store_disk_full_total") == 2
        assert metric(daemon.url, "lousho_requests_refused_disk_full_total") >= 3 + refusals
        stored = [r["span_id"] for r in sql(daemon.url, "SELECT span_id FROM spans")]
        assert sorted(stored) == sorted(acked)  # every acked span, once
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])
    con = open_read_only(db)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchall() == [(len(acked),)]
    finally:
        con.close()
