"""A 20,000-span burst from one agent process through instrument() and the real OTLP/HTTP exporter: no span lost.

At the SDK's defaults the same burst loses thousands of its spans even to a receiver that acks at once
(docs/observe.md, "Bursts"). The burst goes first to an instant-ack control receiver, then to a real daemon:
a loss at the control is the client's own, a loss at the daemon only is the receiver's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from daemon_support import sql
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

SPANS = 20_000
AGENT = Path(__file__).with_name("burst_agent.py")


class InstantAck:
    """Acks every OTLP/HTTP export at once and counts its spans: the most any receiver could get."""

    def __init__(self) -> None:
        self.spans = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()
                request = ExportTraceServiceRequest.FromString(body)
                count = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                with lock:
                    outer.spans += count

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def instant_ack() -> Iterator[InstantAck]:
    receiver = InstantAck()
    try:
        yield receiver
    finally:
        receiver.stop()


def _burst(endpoint: str, service: str) -> dict[str, int]:
    """One agent process sends the burst and shuts its provider down; what it reports."""
    # lousho's own settings: none of the user's OTEL_BSP_* or exporter variables reach the agent.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_BSP_", "OTEL_EXPORTER_"))}
    out = subprocess.run([sys.executable, str(AGENT), endpoint, service, str(SPANS)], capture_output=True,
                         text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.system
def test_a_burst_through_instrument_reaches_an_instant_ack_receiver_whole(instant_ack):
    report = _burst(instant_ack.url, "burst-control")
    assert report["created"] == SPANS
    assert instant_ack.spans == SPANS, f"the SDK dropped spans ({report['queued_at_end']:,} queued at the end)"


@pytest.mark.system
def test_a_burst_through_instrument_is_stored_whole_by_the_daemon(daemon):
    report = _burst(daemon.url, "burst-daemon")
    assert report["created"] == SPANS
    # shutdown() returned after the last export was acked. A daemon that acks once a request is durable
    # but not yet committed to the table may show the last batches a moment later: wait for them a little.
    query = "SELECT count(*) AS n, count(DISTINCT span_key) AS keys FROM spans WHERE service_name = 'burst-daemon'"
    deadline = time.monotonic() + 10
    while (rows := sql(daemon.url, query)) != [{"n": SPANS, "keys": SPANS}] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rows == [{"n": SPANS, "keys": SPANS}], f"{report['queued_at_end']:,} spans were queued at the end"
