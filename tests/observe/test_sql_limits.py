"""One SQL query cannot take the daemon with it: a huge statement, an answer nobody reads, a SELECT past
the memory limit. Each is refused or cut off with a code, and ingest goes on."""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
import urllib.parse

import pytest
from daemon_support import get, post, sql
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon


def _sql_reply(url: str, query: str):
    return post(url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json")


def _export(url: str) -> float:
    trace_id, span_id = new_ids()
    body = request([chat_span(trace_id, span_id)]).SerializeToString()
    t0 = time.perf_counter()
    assert post(url, "/v1/traces", body, "application/x-protobuf").status == 200
    return time.perf_counter() - t0


def _acks(url: str, seconds: float) -> list[float]:
    latencies = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        latencies.append(_export(url))
        time.sleep(0.02)
    return latencies


def _in_list(items: int) -> str:
    return "SELECT count(*) AS n FROM range(10) WHERE range IN (" + ",".join(str(i) for i in range(items)) + ")"


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory now (``VmHWM``: its peak so far)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field}")


def _gauge(url: str, name: str) -> int:
    for line in get(url, "/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise AssertionError(f"{name} is not in /metrics")


@pytest.mark.system
def test_a_huge_statement_is_refused_in_its_time_limit_and_a_long_one_never_delays_ingest(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb", "--sql-timeout", "5")
    try:
        # 700,000 items (4.8 MB): refused before anything parses it, not answered after 45 s.
        t0 = time.monotonic()
        reply = _sql_reply(daemon.url, _in_list(700_000))
        refused_s = time.monotonic() - t0
        assert reply.status == 413 and reply.json()["error"]["code"] == "LOUSHO_SQL_TOO_LARGE", reply.body[:300]
        assert refused_s < 5.0

        # 130,000 items (0.8 MB, under the bound): DuckDB parses and checks it on a SQL worker with the
        # GIL released while exports are acked as fast as before.
        before = _acks(daemon.url, 1.5)
        replies = []
        long_query = threading.Thread(target=lambda: replies.append(_sql_reply(daemon.url, _in_list(130_000))))
        t0 = time.monotonic()
        long_query.start()
        time.sleep(0.3)
        during = _acks(daemon.url, 2.0)
        long_query.join(60)
        answered_s = time.monotonic() - t0
        assert replies and replies[0].status in (200, 400), replies[0].body[:300]
        if replies[0].status == 400:
            assert replies[0].json()["error"]["code"] == "LOUSHO_SQL_TIMEOUT"
        extra_ms = (statistics.median(during) - statistics.median(before)) * 1000
        print(f"ack median before {statistics.median(before) * 1000:.1f} ms, during "
              f"{statistics.median(during) * 1000:.1f} ms (max {max(during) * 1000:.1f}), query {answered_s:.1f} s")
        assert extra_ms < 50, f"exports waited {extra_ms:.0f} ms more behind a long statement"
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans")[0]["n"] == len(before) + len(during)
    finally:
        assert daemon.stop() == 0


def _stalled_reader(url: str, query: str) -> socket.socket:
    """A client that sends a query and never reads a byte of the answer."""
    parts = urllib.parse.urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = json.dumps({"query": query}).encode()
    sock.sendall(b"POST /v1/sql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return sock


@pytest.mark.system
def test_answers_nobody_reads_are_freed_after_the_send_timeout_and_the_daemon_keeps_serving(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb", "--send-timeout", "2", "--sql-workers", "3")
    pid = daemon.process.pid
    # About 40 MB of JSON per answer.
    big = "SELECT repeat('x', 2000) || range AS s FROM range(20000)"
    socks = []
    try:
        baseline = _rss_mib(pid)
        socks = [_stalled_reader(daemon.url, big) for _ in range(6)]
        deadline = time.monotonic() + 30
        while _gauge(daemon.url, "lousho_sql_pending_bytes") < 100_000_000 and time.monotonic() < deadline:
            time.sleep(0.1)
        pending = _gauge(daemon.url, "lousho_sql_pending_bytes")
        held = _rss_mib(pid)
        assert pending >= 100_000_000, pending
        _export(daemon.url)  # ingest goes on meanwhile
        t0 = time.monotonic()
        # Three workers answer the six readers three at a time: between the first three answers' release and the
        # next three's, nothing is pending for a moment, and a poll of the pending bytes alone caught that gap
        # on a loaded machine (3 queries still in flight). Both gauges must reach 0.
        while (_gauge(daemon.url, "lousho_sql_pending_bytes") or _gauge(daemon.url, "lousho_sql_in_flight")) \
                and time.monotonic() - t0 < 20:
            time.sleep(0.1)
        released_s = time.monotonic() - t0
        after = _rss_mib(pid)
        # The peak, not the reading at the moment 100 MB were pending: under load that reading came before the
        # answers were all built (328 MiB held, 231 after, in one run of the whole suite; 450-520 alone).
        held = max(held, _rss_mib(pid, "VmHWM"))
        print(f"RSS baseline {baseline:.0f} MiB, held {held:.0f} MiB ({pending / 2**20:.0f} MiB pending), "
              f"after {after:.0f} MiB; released {released_s:.1f} s after the peak")
        assert _gauge(daemon.url, "lousho_sql_pending_bytes") == 0
        assert _gauge(daemon.url, "lousho_sql_in_flight") == 0
        assert released_s < 2 + 5
        assert after < held - 100
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": 1}]
    finally:
        for sock in socks:
            sock.close()
        assert daemon.stop() == 0


@pytest.mark.system
def test_a_select_past_the_memory_limits_is_a_coded_400_and_the_daemon_lives(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb", "--memory-limit", "64MiB", "--sql-query-memory", "16MiB")
    try:
        # DuckDB's own limit: an aggregate that must hold 200 MB at once.
        reply = _sql_reply(daemon.url, "SELECT length(string_agg(repeat('x', 100) || range, ',')) AS n "
                                       "FROM range(2000000)")
        assert reply.status == 400, reply.body[:300]
        error = reply.json()["error"]
        assert error["code"] == "LOUSHO_SQL_OUT_OF_MEMORY" and "--memory-limit" in error["hint"], error
        # The per-query limit on the answer: 60 MB of rows.
        reply = _sql_reply(daemon.url, "SELECT repeat('x', 1000) || range AS s FROM range(60000)")
        assert reply.status == 400, reply.body[:300]
        assert reply.json()["error"]["code"] == "LOUSHO_SQL_OUT_OF_MEMORY"
        # Alive and ingesting.
        _export(daemon.url)
        assert get(daemon.url, "/healthz").json() == {"status": "ok"}
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": 1}]
    finally:
        assert daemon.stop() == 0
