"""Slow or stalled clients cannot deny service, hold memory without bound, or block a shutdown.

Raw sockets stand for the hostile clients: half-sent request heads, bodies that stop arriving.
"""

from __future__ import annotations

import gzip
import resource
import socket
import time
import urllib.parse
from pathlib import Path

import duckdb
import pytest
from daemon_support import Reply, get, post
from otlp_bodies import chat_span, new_ids, request

from lousho.observe import instrument
from lousho.observe.client.process import DaemonProcess, start_daemon

MIB = 1024 * 1024
STALLED = 1100  # past uvicorn's old limit_concurrency of 1024 connections


def _address(daemon: DaemonProcess) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(daemon.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def _connect(daemon: DaemonProcess, first_bytes: bytes) -> socket.socket:
    sock = socket.create_connection(_address(daemon), timeout=10)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def _open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _read_reply(sock: socket.socket, timeout: float) -> Reply | None:
    """The HTTP answer on ``sock``, or None if the daemon closed it without one."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return Reply(int(lines[0].split()[1]), headers, body)


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _span_count(daemon: DaemonProcess, service: str) -> int:
    reply = post(daemon.url, "/v1/sql",
                 f'{{"query": "SELECT count(*) AS n FROM spans WHERE service_name = \'{service}\'"}}'.encode(),
                 "application/json")
    assert reply.status == 200, reply.body
    return reply.json()["rows"][0]["n"]


@pytest.fixture
def many_fds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 4 * STALLED) if hard != resource.RLIM_INFINITY else 4 * STALLED
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.system
@pytest.mark.slow
def test_healthz_and_an_export_succeed_while_1100_connections_stall_in_their_headers(tmp_path, many_fds):
    # A long header timeout: this test is about the stalled connections while they are still open.
    daemon = start_daemon(tmp_path / "o.duckdb", "--header-timeout", "120")
    stalled: list[socket.socket] = []
    try:
        before = _open_fds(daemon.pid)
        for i in range(STALLED):
            half = b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n" if i % 2 else b"GET /heal"
            stalled.append(_connect(daemon, half))
        _wait_for(lambda: _open_fds(daemon.pid) >= before + STALLED, 30, "the daemon to accept them all")

        assert get(daemon.url, "/healthz").status == 200
        provider = instrument("while-stalled", daemon.url)
        with provider.get_tracer("t").start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
            pass
        provider.shutdown()
        assert _span_count(daemon, "while-stalled") == 1
    finally:
        for sock in stalled:
            sock.close()
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


@pytest.mark.system
@pytest.mark.parametrize("first_bytes", [b"", b"GET /healthz HT", b"GET /healthz HTTP/1.1\r\nHost: 127"])
def test_a_connection_that_stalls_before_its_headers_end_is_closed_after_the_header_timeout(
    tmp_path, first_bytes
):
    daemon = start_daemon(tmp_path / "o.duckdb", "--header-timeout", "1")
    try:
        sock = _connect(daemon, first_bytes)
        started = time.monotonic()
        try:
            assert _read_reply(sock, timeout=8) is None  # closed, no answer: there was no request
        finally:
            sock.close()
        assert 0.8 <= time.monotonic() - started < 5
        # Requests that come whole are still served.
        assert get(daemon.url, "/healthz").status == 200
    finally:
        assert daemon.stop() == 0


@pytest.mark.system
def test_a_body_that_stops_arriving_gets_408_after_the_body_timeout(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb", "--body-timeout", "1")
    try:
        sock = _connect(daemon, b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                b"Content-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n"
                                + b"\x0a" * 10)
        started = time.monotonic()
        try:
            reply = _read_reply(sock, timeout=8)
        finally:
            sock.close()
        assert reply is not None and reply.status == 408
        assert time.monotonic() - started < 5
        assert reply.headers["connection"] == "close"
        # OTLP path: a google.rpc.Status carrying the code.
        assert b"LOUSHO_OBSERVE_BODY_TIMEOUT" in reply.body
        assert get(daemon.url, "/healthz").status == 200
    finally:
        assert daemon.stop() == 0


@pytest.mark.system
@pytest.mark.slow
def test_stalled_gzip_uploads_are_refused_503_once_the_byte_budget_is_spent_and_memory_stays_bounded(tmp_path):
    # Each upload inflates to 48 MiB (under the 64 MiB body limit) and then stalls, its last bytes
    # never sent. Sixteen of them used to hold 16 x 48 MiB; the budget here is the 32 MiB queue.
    daemon = start_daemon(tmp_path / "o.duckdb", "--queue-mib", "32", "--body-timeout", "120")
    body = gzip.compress(b"\0" * (48 * MIB), compresslevel=9)
    uploads: list[socket.socket] = []
    try:
        rss_before = _status(daemon.pid, "VmRSS")
        replies: list[Reply | None] = []
        for _ in range(16):
            sock = _connect(daemon, b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                    b"Content-Type: application/x-protobuf\r\nContent-Encoding: gzip\r\n"
                                    + f"Content-Length: {len(body) + 100}\r\n\r\n".encode() + body)
            uploads.append(sock)
            try:
                replies.append(_read_reply(sock, timeout=1.5))
            except TimeoutError:
                replies.append(None)  # still reading: this one holds its bytes
        refused = [r for r in replies if r is not None]
        assert len(refused) >= 12, [r and r.status for r in replies]
        for reply in refused:
            assert reply.status == 503
            assert reply.headers["retry-after"] == "1"
            assert b"LOUSHO_OBSERVE_BUSY" in reply.body
        grown = _status(daemon.pid, "VmHWM") - rss_before
        assert grown < 300 * MIB, f"the daemon grew by {grown / MIB:.0f} MiB"
        assert get(daemon.url, "/healthz").status == 200
    finally:
        for sock in uploads:
            sock.close()
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


@pytest.mark.system
def test_sigterm_with_a_body_held_open_exits_zero_within_the_deadline_and_keeps_acked_spans(tmp_path):
    db = tmp_path / "o.duckdb"
    daemon = start_daemon(db, "--shutdown-timeout", "2", "--body-timeout", "120")
    bodies = [request([chat_span(*new_ids()) for _ in range(50)]).SerializeToString() for _ in range(4)]
    for b in bodies:
        assert post(daemon.url, "/v1/traces", b, "application/x-protobuf").status == 200
    held = _connect(daemon, b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Content-Type: application/x-protobuf\r\nContent-Length: 100000\r\n\r\n"
                            + bodies[0][:100])
    try:
        time.sleep(0.3)  # let the daemon start reading the held body
        started = time.monotonic()
        code = daemon.stop(timeout=30)
        elapsed = time.monotonic() - started
    finally:
        held.close()
        daemon.kill()
    assert code == 0, "\n".join(daemon.output[-30:])
    assert elapsed < 2 + 6, f"shutdown took {elapsed:.1f} s"
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (200,)
    finally:
        con.close()


def test_bodies_being_read_share_the_writers_byte_budget(tmp_path):
    from lousho.observe.metrics import Metrics
    from lousho.observe.store.span_store import SpanStore
    from lousho.observe.store.writer import Writer

    store = SpanStore(tmp_path / "o.duckdb")
    writer = Writer(store, Metrics(), capacity_bytes=100)
    try:
        assert writer.reserve(60)
        assert writer.reserve(90, held=60)  # alone, one body may pass the budget
        assert not writer.reserve(1)  # anyone else is refused meanwhile
        assert not writer.has_room(1)  # and so are requests for the queue
        writer.release(150)
        assert writer.reserve(100) and not writer.reserve(1, held=0)
        writer.release(100)
        assert writer.has_room(100)
    finally:
        writer.close()
        store.close()
