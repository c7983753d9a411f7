"""A client that keeps its connection to the daemon open (the OTel exporter, `lousho sql`) is not slowed by it."""

from __future__ import annotations

import http.client
import urllib.parse

import pytest
from socket_support import server_side_nodelay

from lousho.observe.client.process import DaemonProcess


@pytest.mark.system
def test_the_daemon_turns_nagle_off_on_a_kept_alive_connection(shared_daemon: DaemonProcess) -> None:
    """uvicorn sends a response's head and body separately: with Nagle on, the body waited for the
    client's delayed ACK, about 40 ms on every request over a reused connection."""
    parts = urllib.parse.urlsplit(shared_daemon.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        for _ in range(2):
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
        assert conn.sock is not None
        assert server_side_nodelay(shared_daemon.pid, conn.sock)
    finally:
        conn.close()
