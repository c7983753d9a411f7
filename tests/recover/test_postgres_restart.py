"""The Postgres server restarts under a live store (STYLE §14: test crashes by crashing): a clean stop, then a
crash (``pg_ctl stop -m immediate``), each followed by a start of the same data dir. The session's server is the
one restarted; ``finally`` starts it again whatever failed, so the tests after this one keep a server."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pg_support import PgServer

from lousho.recover import durable
from lousho.recover.errors import StoreUnavailable
from lousho.recover.store import RunStore
from lousho.recover.store import open as open_store

pytestmark = [pytest.mark.system, pytest.mark.slow]


@pytest.fixture
def restartable(pg_server: PgServer) -> Iterator[PgServer]:
    try:
        yield pg_server
    finally:
        if not pg_server.running():
            pg_server.start()


def test_the_store_reconnects_on_the_next_call_after_a_restart_and_a_crash_of_the_server(
    restartable: PgServer, pg_url: str,
):
    store: RunStore = open_store(pg_url)
    try:
        run = durable.start(store, "r1", "a", "send", {"q": 1})
        run.step("before", lambda: 0)

        restartable.stop("fast")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as info:  # down: said at once, retryable, not a hang
            store.get_run("r1")
        assert info.value.retryable and "***" in info.value.location
        assert time.monotonic() - started < 5
        with pytest.raises(StoreUnavailable):
            store.save_step("r1", 1, "while down", 1, epoch=0)
        restartable.start()

        assert run.step("after restart", lambda: 1) == 1  # the next call reconnects; the handle carries on
        restartable.stop("immediate")  # a crash: no shutdown checkpoint, recovery replays the WAL at start
        restartable.start()
        assert run.step("after crash", lambda: 2) == 2
        run.finish("done")

        steps = store.load_steps("r1")
        assert [s.name for s in steps.values()] == ["before", "after restart", "after crash"]
        record = store.get_run("r1")
        assert (record.status, record.output, record.lease_epoch) == ("finished", "done", 0)
    finally:
        store.close()
