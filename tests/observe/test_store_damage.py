"""A damaged store is refused at start: the daemon reads every table before it serves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from coded_errors import assert_coded, start_fails
from daemon_support import post
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon

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


