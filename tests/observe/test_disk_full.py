"""A full disk is retryable, never corruption: 503 while full, back by itself when room returns, no span lost.

The store lives on a tmpfs the test mounts (root only; skipped with the reason otherwise) and fills with a
ballast file. DuckDB answers a full disk two ways (store_damage.py): a commit that finds no room for its
WAL fails alone; a checkpoint that finds none invalidates the database. Both are exercised.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import grpc
import pytest
from daemon_support import get, post, sql
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon
from lousho.observe.store.span_store import open_read_only
from lousho.observe.store.writer import CHECKPOINT_EVERY_BYTES

PROTOBUF = "application/x-protobuf"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MiB = 1024 * 1024


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)],
                              capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("no mount command: a small file system for the store cannot be made")
    if done.returncode != 0:
        pytest.skip(f"mounting a 32 MiB tmpfs was refused (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


def _fill(ballast: Path, leave: int) -> None:
    """Fill the file system holding ``ballast``, then give back ``leave`` bytes."""
    block = b"\0" * MiB
    with ballast.open("wb") as f:
        try:
            while True:
                f.write(block)
                f.flush()
        except OSError:
            pass
        try:
            f.flush()
        except OSError:
            pass  # deliberate: what did not fit is simply not written
    os.truncate(ballast, max(0, ballast.stat().st_size - leave))


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


def _metric(url: str, name: str) -> float:
    for line in get(url, "/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.system
def test_a_full_disk_answers_503_heals_without_restart_and_loses_no_acked_span(small_disk):
    db = small_disk / "observe.duckdb"
    ballast = small_disk / "ballast"
    daemon = start_daemon(db)
    acked: list[str] = []
    try:
        # The writer checkpoints when idle once CHECKPOINT_EVERY_BYTES of requests were committed. Resent
        # copies count toward that mark but write nothing, so one body stored and then resent brings the
        # store to the mark with a WAL of a few MiB; the disk keeps room for small commits, not a checkpoint.
        body, ids = _body()
        assert post(daemon.url, "/v1/traces", body, PROTOBUF).status == 200
        acked += ids
        sent = len(body)
        while sent + len(body) < CHECKPOINT_EVERY_BYTES:
            assert post(daemon.url, "/v1/traces", body, PROTOBUF).status == 200
            sent += len(body)
        _fill(ballast, leave=256 * 1024)
        assert post(daemon.url, "/v1/traces", body, PROTOBUF).status == 200
        # A checkpoint is skipped while the kept runs fold; each small commit past the mark tries again.
        refusals = 0
        for _ in range(50):
            if get(daemon.url, "/healthz").status != 200:
                break
            small, small_ids = _body(spans=1, value_bytes=100)
            if post(daemon.url, "/v1/traces", small, PROTOBUF).status == 200:
                acked += small_ids
            else:
                refusals += 1  # the checkpoint failed meanwhile: this one was not acked
            time.sleep(0.05)

        health = _health_becomes(daemon.url, "degraded")
        assert health["http"] == 503 and health.get("reason") == "disk full", health
        assert health["code"] == "LOUSHO_STORE_DISK_FULL", health
        refused_body, refused_ids = _body(spans=10)
        refused = post(daemon.url, "/v1/traces", refused_body, PROTOBUF)
        assert refused.status == 503 and refused.headers.get("retry-after"), refused
        assert b"LOUSHO_STORE_DISK_FULL" in refused.body
        with grpc.insecure_channel(daemon.grpc_target) as channel:
            export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
            with pytest.raises(grpc.RpcError) as unavailable:
                export(refused_body, timeout=10)
        assert unavailable.value.code() == grpc.StatusCode.UNAVAILABLE, unavailable.value
        assert _metric(daemon.url, "lousho_store_disk_full") == 1
        assert _metric(daemon.url, "lousho_store_corrupt") == 0

        # Room again: the daemon resumes by itself, before any export asks it to.
        ballast.unlink()
        health = _health_becomes(daemon.url, "ok")
        assert health["http"] == 200, health
        assert post(daemon.url, "/v1/traces", refused_body, PROTOBUF).status == 200
        acked += refused_ids

        # A commit that finds no room for its WAL: refused alone, retried once there is room.
        _fill(ballast, leave=0)
        body, ids = _body(spans=50)
        full = post(daemon.url, "/v1/traces", body, PROTOBUF)
        assert full.status == 503 and b"LOUSHO_STORE_DISK_FULL" in full.body, full
        ballast.unlink()
        assert _health_becomes(daemon.url, "ok")["http"] == 200
        assert post(daemon.url, "/v1/traces", body, PROTOBUF).status == 200
        acked += ids

        assert _metric(daemon.url, "lousho_store_disk_full") == 0
        assert _metric(daemon.url, "lousho_store_disk_full_total") == 2
        assert _metric(daemon.url, "lousho_requests_refused_disk_full_total") == 3 + refusals
        stored = {r["span_id"] for r in sql(daemon.url, "SELECT span_id FROM spans")}
        assert stored == set(acked)
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])
    con = open_read_only(db)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchall() == [(len(acked),)]
    finally:
        con.close()
