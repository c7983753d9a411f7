"""The spool's segment files: a torn tail is cut off, a damaged segment is set aside, replay starts past the
store's position, and sequence numbers never go back."""

from __future__ import annotations

from pathlib import Path

import pytest

from lousho.observe.store.spool import KIND_JSON, KIND_PROTOBUF, Spool, iter_records


def _spool(directory: Path, loaded: int = 0, seen: list | None = None, capacity: int = 1 << 30) -> Spool:
    return Spool(directory, capacity_bytes=capacity, loaded_seq=loaded,
                 on_durable=lambda records: (seen if seen is not None else []).extend(records))


def _fill(directory: Path, bodies: list[bytes], loaded: int = 0, capacity: int = 1 << 30) -> list[int]:
    spool = _spool(directory, loaded, capacity=capacity)
    try:
        return [spool.append(body, KIND_PROTOBUF if i % 2 else KIND_JSON).result(10).seq
                for i, body in enumerate(bodies)]
    finally:
        spool.close()


def test_records_come_back_in_order_with_their_kinds_and_sequence_numbers(tmp_path):
    bodies = [bytes([i]) * (100 + i) for i in range(5)]
    seen: list = []
    spool = _spool(tmp_path / "s", seen=seen)
    try:
        records = [spool.append(body, KIND_PROTOBUF, payload=i).result(10) for i, body in enumerate(bodies)]
        assert [r.seq for r in records] == [1, 2, 3, 4, 5]
        assert [payload for _, payload in seen] == [0, 1, 2, 3, 4]  # in order, before the acks
        assert [spool.read(r) for r in records] == bodies
    finally:
        spool.close()
    again = _spool(tmp_path / "s", loaded=2)
    try:
        assert [(r.seq, again.read(r)) for r in again.replay] == [(3, bodies[2]), (4, bodies[3]), (5, bodies[4])]
        assert again.append(b"x", KIND_PROTOBUF).result(10).seq == 6
    finally:
        again.close()


def test_a_torn_record_at_the_end_is_cut_off_and_nothing_before_it_is_lost(tmp_path):
    _fill(tmp_path / "s", [b"a" * 50, b"b" * 60, b"c" * 70])
    (segment,) = sorted((tmp_path / "s").iterdir())
    whole = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(b"LSP1\x01\x00\x00\x00" + b"\xff" * 9)  # a header cut short, as a crash mid-write leaves it
    spool = _spool(tmp_path / "s")
    try:
        assert [spool.read(r) for r in spool.replay] == [b"a" * 50, b"b" * 60, b"c" * 70]
        assert segment.stat().st_size == whole
        assert spool.append(b"d", KIND_PROTOBUF).result(10).seq == 4
    finally:
        spool.close()


def test_a_damaged_segment_before_the_last_is_set_aside_and_counted(tmp_path):
    big = [bytes([i]) * 30_000 for i in range(4)]
    _fill(tmp_path / "s", big, capacity=256 * 1024)  # segments of 64 KiB: two records each
    segments = sorted((tmp_path / "s").glob("*.seg"))
    assert len(segments) == 2
    data = bytearray(segments[0].read_bytes())
    data[100] ^= 0xFF
    segments[0].write_bytes(bytes(data))
    spool = _spool(tmp_path / "s")
    try:
        assert spool.damaged_segments == 1
        assert [r.seq for r in spool.replay] == [3, 4]
        assert sorted(p.suffix for p in (tmp_path / "s").iterdir()) == [".damaged", ".seg"]
    finally:
        spool.close()


def test_sequence_numbers_continue_past_the_stores_position_when_the_spool_is_gone(tmp_path):
    spool = _spool(tmp_path / "fresh", loaded=41)
    try:
        assert spool.replay == []
        assert spool.append(b"x", KIND_PROTOBUF).result(10).seq == 42
    finally:
        spool.close()


def test_released_segments_are_deleted_and_the_bound_refuses_past_it(tmp_path):
    spool = _spool(tmp_path / "s", capacity=1000)
    try:
        assert spool.has_room(5000)  # an empty spool takes any one body
        record = spool.append(b"x" * 600, KIND_PROTOBUF).result(10)
        assert not spool.has_room(600)
        spool.release(record.seq)
        spool.append(b"", KIND_PROTOBUF).result(10)  # a write after the release: the thread has run it
        assert spool.has_room(600)
        assert [r.seq for path in (tmp_path / "s").glob("*.seg") for r in iter_records(path)] == [2]
    finally:
        spool.close()


def test_an_unknown_kind_is_refused(tmp_path):
    spool = _spool(tmp_path / "s")
    try:
        with pytest.raises(ValueError):
            spool.append(b"x", 9)
    finally:
        spool.close()
