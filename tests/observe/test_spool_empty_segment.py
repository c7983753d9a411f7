"""An empty last segment (a full disk at a new segment's first record, or a crash between creating a segment
and its first sync) must not make the spool delete the file it writes to: that file holds acked records not
yet loaded, and a restart would never replay them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from daemon_support import post, sql
from disk_support import fill_disk, tmpfs
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon
from lousho.observe.errors import StoreDiskFull
from lousho.observe.store.spool import KIND_PROTOBUF, Spool

SEGMENT = 64 * 1024  # the smallest segment: two 30 kB bodies fill one


def _spool(directory: Path, loaded: int) -> Spool:
    return Spool(directory, capacity_bytes=1 << 30, loaded_seq=loaded, on_durable=lambda records: None,
                 segment_bytes=SEGMENT)


def _append(spool: Spool, body: bytes) -> int:
    return spool.append(body, KIND_PROTOBUF).result(10).seq


def _acked_survive_a_release_and_a_restart(directory: Path, loaded: int) -> None:
    """Acks past ``loaded``, a release of the first of them only, then a restart: every other ack replays."""
    spool = _spool(directory, loaded)
    try:
        bodies = [bytes([i]) * 100 for i in range(3)]
        records = [spool.append(body, KIND_PROTOBUF).result(10) for body in bodies]
        spool.release(records[0].seq)  # the store loaded and checkpointed the first only
        late = spool.append(b"late", KIND_PROTOBUF).result(10)  # a write after it: the release has run
        assert [spool.read(r) for r in [*records[1:], late]] == [*bodies[1:], b"late"]
    finally:
        spool.close()
    again = _spool(directory, records[0].seq)
    try:
        assert [again.read(r) for r in again.replay] == [*bodies[1:], b"late"]
    finally:
        again.close()


@pytest.mark.parametrize("left", [b"", b"LSP1\x01\x00"], ids=["created-then-killed", "torn-first-record"])
def test_an_empty_last_segment_from_the_last_run_never_costs_an_acked_record(tmp_path, left):
    directory = tmp_path / "s"
    spool = _spool(directory, 0)
    try:
        last = max(_append(spool, b"x" * 100) for _ in range(3))
    finally:
        spool.close()
    # What a stop left: the next segment created, named after the next sequence number, with nothing synced.
    (directory / f"{last + 1:020d}.seg").write_bytes(left)
    _acked_survive_a_release_and_a_restart(directory, last)


def test_a_full_disk_at_a_new_segments_first_record_never_costs_an_acked_record(tmp_path):
    with tmpfs(tmp_path / "disk", size="1m") as disk:
        directory = disk / "s"
        spool = _spool(directory, 0)
        try:
            last = max(_append(spool, b"x" * 30_000) for _ in range(2))  # fills the first segment
            fill_disk(disk / "ballast", leave=0)
            with pytest.raises(StoreDiskFull):
                _append(spool, b"y" * 30_000)  # a new segment is created; its first record finds no room
        finally:
            spool.close()
        assert sorted(p.stat().st_size for p in directory.iterdir())[0] == 0  # the empty segment left behind
        (disk / "ballast").unlink()
        _acked_survive_a_release_and_a_restart(directory, last)



def _body(spans: int, value_bytes: int) -> tuple[bytes, list[str]]:
    batch = [chat_span(new_ids()[0], new_ids()[1], **{"gen_ai.input.messages": os.urandom(value_bytes // 2).hex()})
             for _ in range(spans)]
    return request(batch).SerializeToString(), [s.span_id.hex() for s in batch]


@pytest.mark.system
def test_a_daemon_killed_after_a_full_disk_at_a_new_segment_keeps_every_acked_span(tmp_path):
    """The reviewer's end to end case: a full disk at a new segment's first record, a kill; after a restart
    the loader's checkpoint releases segments while acks go on into the segment of that name; a kill again."""
    with tmpfs(tmp_path / "disk", size="4m") as disk:
        db = tmp_path / "s.duckdb"
        # Segments of 64 KiB (a quarter of the spool); a load every 2 s, so the last acks wait unloaded.
        args = ("--spool-dir", str(disk / "spool"), "--spool-mib", "0.25", "--load-interval", "2")
        acked: list[str] = []
        daemon = start_daemon(db, *args)
        try:
            big, ids = _body(spans=4, value_bytes=10_000)
            assert post(daemon.url, "/v1/traces", big, "application/x-protobuf").status == 200
            acked += ids
            fill_disk(disk / "ballast", leave=0)
            big, _ids = _body(spans=4, value_bytes=10_000)  # past the segment: a new one, no room for it
            assert post(daemon.url, "/v1/traces", big, "application/x-protobuf").status == 503
        finally:
            daemon.kill()
        (disk / "ballast").unlink()
        daemon = start_daemon(db, *args)
        try:
            # Small acks for 3 s: the load at 2 s passes a quarter of the spool, so its checkpoint releases
            # the loaded segments while later acks go on; the kill comes before the next load.
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                small, ids = _body(spans=1, value_bytes=1_800)
                assert post(daemon.url, "/v1/traces", small, "application/x-protobuf").status == 200
                acked += ids
                time.sleep(0.1)
        finally:
            daemon.kill()
        daemon = start_daemon(db, *args)
        try:
            stored = [r["span_id"] for r in sql(daemon.url, "SELECT span_id FROM spans")]
        finally:
            assert daemon.stop() == 0
        assert sorted(stored) == sorted(acked)
