"""A waiter that goes away never stops the spool: a request cancelled while it waits for its sync (a client
gone, the shutdown's timeout) once cancelled the spool's future through ``asyncio.wrap_future``; resolving it
then raised on the spool's thread and ended it, and every later append waited for ever."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from lousho.observe.store.spool import KIND_PROTOBUF, Spool


class _HeldHandoff:
    """``on_durable`` that holds the spool's thread after a sync, before the acks, until let go: the window
    in which a waiter can be cancelled while its record is being written."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()

    def __call__(self, records: list) -> None:
        self.entered.set()
        assert self.go.wait(10)


def _spool(directory: Path, on_durable) -> Spool:
    return Spool(directory, capacity_bytes=1 << 30, loaded_seq=0, on_durable=on_durable)


async def _cancel_waiters(spool: Spool, handoff: _HeldHandoff) -> None:
    """One waiter cancelled while its record is written, one cancelled before its group is taken."""
    writing = asyncio.ensure_future(asyncio.wrap_future(spool.append(b"a" * 100, KIND_PROTOBUF)))
    assert await asyncio.to_thread(handoff.entered.wait, 10)
    queued = asyncio.ensure_future(asyncio.wrap_future(spool.append(b"b" * 100, KIND_PROTOBUF)))
    await asyncio.sleep(0)
    writing.cancel()
    queued.cancel()
    await asyncio.gather(writing, queued, return_exceptions=True)
    handoff.go.set()


def test_cancelled_waiters_leave_the_spool_taking_and_acking_requests(tmp_path):
    handoff = _HeldHandoff()
    spool = _spool(tmp_path / "s", handoff)
    try:
        asyncio.run(_cancel_waiters(spool, handoff))
        later = spool.append(b"c" * 100, KIND_PROTOBUF).result(10)  # never resolved when the thread had died
        assert spool.read(later) == b"c" * 100
    finally:
        spool.close()
