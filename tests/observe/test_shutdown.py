"""SIGTERM drains the queue: requests in flight get their 200, all is committed, exit code 0."""

from __future__ import annotations

import threading
import time

import duckdb
import pytest
from daemon_support import get, post
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon


@pytest.mark.system
def test_sigterm_commits_what_is_queued_and_exits_zero(tmp_path):
    db = tmp_path / "o.duckdb"
    daemon = start_daemon(db, "--commit-delay", "0.5")
    bodies = [request([chat_span(*new_ids()) for _ in range(100)]).SerializeToString() for _ in range(8)]
    replies: list[int] = []
    senders = [threading.Thread(target=lambda b=b: replies.append(
        post(daemon.url, "/v1/traces", b, "application/x-protobuf").status)) for b in bodies]
    for s in senders:
        s.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        metrics = get(daemon.url, "/metrics").body.decode()
        if "lousho_queue_bytes 0" not in metrics:
            break
        time.sleep(0.01)
    time.sleep(0.2)  # let every sender reach the daemon
    assert daemon.stop() == 0
    for s in senders:
        s.join(30)
    assert replies == [200] * 8
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (800,)
    finally:
        con.close()
