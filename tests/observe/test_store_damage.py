"""A damaged store is refused at start, and damage found later makes the daemon unhealthy instead of
answering "retry" forever."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest
from coded_errors import assert_coded, start_fails
from daemon_support import get, post
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.process import start_daemon

PROTOBUF = "application/x-protobuf"
# DuckDB 2.0.1's layout: three 4 KiB headers, then blocks, each starting with its 8-byte checksum.
_HEADERS = 3 * 4096


def _fill_store(db: Path, requests: int = 20, spans: int = 500) -> None:
    """A store with several data blocks, written through a daemon and checkpointed by its stop."""
    daemon = start_daemon(db)
    try:
        for _ in range(requests):
            trace_id = new_ids()[0]
            batch = [chat_span(trace_id, new_ids()[1], **{"gen_ai.input.messages": os.urandom(100).hex()})
                     for _ in range(spans)]
            assert post(daemon.url, "/v1/traces", request(batch).SerializeToString(), PROTOBUF).status == 200
    finally:
        assert daemon.stop() == 0


@pytest.mark.system
@pytest.mark.slow
def test_a_store_truncated_to_half_is_refused_at_start(tmp_path):
    db = tmp_path / "observe.duckdb"
    _fill_store(db)
    os.truncate(db, db.stat().st_size // 2)
    assert_coded(start_fails(db), "LOUSHO_STORE_CORRUPT", str(db))


@pytest.mark.system
@pytest.mark.slow
def test_a_store_with_garbage_in_the_middle_is_refused_at_start(tmp_path):
    db = tmp_path / "observe.duckdb"
    _fill_store(db)
    size = db.stat().st_size
    with db.open("r+b") as f:
        f.seek(size // 3)
        f.write(os.urandom(size // 3))
    result = start_fails(db)
    assert_coded(result, "LOUSHO_STORE_CORRUPT", str(db))
    assert "move" in result.stderr and "backup" in result.stderr


def _index_blocks(db: Path) -> tuple[int, list[int]]:
    """The block size and the blocks holding no table data and no metadata: the indexes."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        block_size, total = con.execute("SELECT block_size, total_blocks FROM pragma_database_size()").fetchone()
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        used = {r[0] for t in tables
                for r in con.execute(f"SELECT DISTINCT block_id FROM pragma_storage_info('{t}')").fetchall()}
        used |= {r[0] for r in con.execute("SELECT block_id FROM pragma_metadata_info()").fetchall()}
    finally:
        con.close()
    return block_size, [b for b in range(total) if b not in used]


@pytest.mark.system
@pytest.mark.slow
def test_damage_found_by_a_commit_makes_the_daemon_unhealthy_and_exports_not_retryable(tmp_path):
    db = tmp_path / "observe.duckdb"
    _fill_store(db, requests=4)
    block_size, index_blocks = _index_blocks(db)
    assert index_blocks
    with db.open("r+b") as f:
        for block in index_blocks:
            f.seek(_HEADERS + block * block_size + 8)
            f.write(os.urandom(block_size - 8))
    # Indexes are read lazily, so this damage passes the check at start and shows at the first commit.
    daemon = start_daemon(db)
    try:
        assert get(daemon.url, "/healthz").status == 200
        for _ in range(2):
            trace_id, span_id = new_ids()
            reply = post(daemon.url, "/v1/traces", request([chat_span(trace_id, span_id)]).SerializeToString(),
                         PROTOBUF)
            assert reply.status == 500, reply.body
            assert b"LOUSHO_STORE_CORRUPT" in reply.body and "retry-after" not in reply.headers
        health = get(daemon.url, "/healthz")
        assert health.status == 503
        assert health.json()["code"] == "LOUSHO_STORE_CORRUPT" and str(db) in health.json()["hint"]
        assert "lousho_store_corrupt 1" in get(daemon.url, "/metrics").body.decode()
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])
