"""Slow SQL runs on its own few threads: ingest is acked at once, and extra queries get 503 + Retry-After."""

from __future__ import annotations

import json
import threading
import time

import pytest
from daemon_support import Reply, post, sql
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from lousho.observe.client.process import start_daemon

SQL_TIMEOUT_S = 6.0
# Runs until the daemon's --sql-timeout stops it: a cross join of a billion pairs per side.
SLOW = "SELECT sum(a.range * b.range) AS s FROM range(1000000000) a, range(1000000000) b"


def _sql_reply(url: str, query: str) -> Reply:
    return post(url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json")


@pytest.mark.system
@pytest.mark.slow
def test_saturated_sql_workers_neither_delay_ingest_nor_queue_without_bound(tmp_path):
    workers = 2
    daemon = start_daemon(tmp_path / "o.duckdb", "--sql-timeout", str(SQL_TIMEOUT_S),
                          "--sql-workers", str(workers))
    slow_replies: list[Reply] = []
    try:
        # One more slow query than there are workers and wait slots (as many as workers): exactly one
        # is turned away at once, and then every slot is certainly taken until the time limit.
        slow = [threading.Thread(target=lambda: slow_replies.append(_sql_reply(daemon.url, SLOW)))
                for _ in range(2 * workers + 1)]
        started = time.monotonic()
        for thread in slow:
            thread.start()
        while not slow_replies and time.monotonic() - started < SQL_TIMEOUT_S / 2:
            time.sleep(0.02)
        assert slow_replies, "no query was turned away while every worker and wait slot was taken"
        busy = slow_replies[0]
        assert busy.status == 503
        assert busy.headers["retry-after"] == "1"
        assert busy.json()["error"]["code"] == "LOUSHO_SQL_BUSY"

        # A real OTel export is acked while the slow queries still hold the workers.
        exporter = OTLPSpanExporter(endpoint=f"{daemon.url}/v1/traces", timeout=30)
        provider = TracerProvider(resource=Resource.create({"service.name": "pool"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        t0 = time.monotonic()
        with provider.get_tracer("pool").start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
            pass
        export_s = time.monotonic() - t0
        provider.shutdown()
        # And a burst of extra queries is turned away at once, not queued.
        burst: list[int] = []
        extra = [threading.Thread(target=lambda: burst.append(_sql_reply(daemon.url, "SELECT 1").status))
                 for _ in range(20)]
        t1 = time.monotonic()
        for thread in extra:
            thread.start()
        for thread in extra:
            thread.join(30)
        burst_s = time.monotonic() - t1
        still_running = time.monotonic() - started < SQL_TIMEOUT_S
        assert still_running, "the slow queries ended before the export was measured; raise SQL_TIMEOUT_S"
        assert export_s < 1.0, f"the export waited {export_s:.2f} s behind SQL"
        assert burst == [503] * 20 and burst_s < 2.0

        for thread in slow:
            thread.join(4 * SQL_TIMEOUT_S)
        assert sorted(r.status for r in slow_replies) == [400] * (2 * workers) + [503]
        assert {r.json()["error"]["code"] for r in slow_replies[1:]} == {"LOUSHO_SQL_TIMEOUT"}
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": 1}]
    finally:
        assert daemon.stop() == 0
