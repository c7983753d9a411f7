"""Ack after commit: SIGKILL under load, restart, and every span whose request got a 200 is there."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse

import pytest
from otlp_bodies import chat_span, new_ids, request

from lousho.observe import connect
from lousho.observe.client.process import start_daemon


def _load(url: str, acked: list[str], stop: threading.Event) -> None:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        while not stop.is_set():
            trace_id, _ = new_ids()
            body = request([chat_span(trace_id, new_ids()[1]) for _ in range(50)]).SerializeToString()
            try:
                conn.request("POST", "/v1/traces", body=body, headers={"content-type": "application/x-protobuf"})
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                return  # the daemon died under us: this request was never acked
            if response.status == 200:
                acked.append(trace_id.hex())
    finally:
        # Closed here, not left to the collector: an unclosed socket's ResourceWarning is an error in this suite.
        conn.close()


@pytest.mark.system
@pytest.mark.slow
def test_sigkill_under_load_loses_no_acked_span(tmp_path):
    db = tmp_path / "o.duckdb"
    acked: list[str] = []
    for _round in range(3):
        daemon = start_daemon(db)
        stop = threading.Event()
        clients = [threading.Thread(target=_load, args=(daemon.url, acked, stop)) for _ in range(4)]
        before = len(acked)
        for c in clients:
            c.start()
        deadline = time.monotonic() + 20
        while len(acked) < before + 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        daemon.kill()  # SIGKILL mid-load: no drain, no checkpoint
        stop.set()
        for c in clients:
            c.join(30)
        assert len(acked) > before, "no request was acked in this round"

    daemon = start_daemon(db)  # the last restart replays DuckDB's WAL
    try:
        store = connect(daemon.url)
        stored = store.sql("SELECT trace_id, count(*) AS n FROM spans GROUP BY trace_id")
    finally:
        assert daemon.stop() == 0
    counts = dict(zip(stored["trace_id"].to_list(), stored["n"].to_list(), strict=True))
    missing = [t for t in acked if counts.get(t) != 50]
    assert not missing, f"{len(missing)} of {len(acked)} acked requests lost spans"
