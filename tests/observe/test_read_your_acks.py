"""Read your acks: a query sent right after an ack sees the acked spans, though the ack came from the spool and
the store loads behind it; when the loader is further behind than the wait, the answer says how far."""

from __future__ import annotations

import json
import time

import grpc
import pytest
from daemon_support import post
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon

PROTOBUF = "application/x-protobuf"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _count(url: str) -> tuple[int, int]:
    reply = post(url, "/v1/sql", json.dumps({"query": "SELECT count(*) AS n FROM spans"}).encode(),
                 "application/json")
    assert reply.status == 200, reply.body
    return reply.json()["rows"][0]["n"], int(reply.headers["x-lousho-lag-ms"])


@pytest.mark.system
def test_a_query_right_after_an_ack_sees_the_acked_spans(tmp_path):
    # The loader waits 30 s to gather a load unless a reader waits: without the watermark wait every count
    # below would be short.
    daemon = start_daemon(tmp_path / "o.duckdb", "--load-interval", "30")
    try:
        expected = 0
        with grpc.insecure_channel(daemon.grpc_target) as channel:
            export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
            for i in range(6):
                body = request([chat_span(*new_ids()) for _ in range(10 + i)]).SerializeToString()
                if i % 2:
                    export(body, timeout=10)
                else:
                    assert post(daemon.url, "/v1/traces", body, PROTOBUF).status == 200
                expected += 10 + i
                started = time.monotonic()
                assert _count(daemon.url) == (expected, 0)
                assert time.monotonic() - started < 5
    finally:
        assert daemon.stop() == 0


@pytest.mark.system
def test_a_query_waits_at_most_read_wait_and_says_the_lag(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb", "--commit-delay", "3", "--read-wait", "0.2")
    try:
        body = request([chat_span(*new_ids()) for _ in range(10)]).SerializeToString()
        assert post(daemon.url, "/v1/traces", body, PROTOBUF).status == 200
        started = time.monotonic()
        count, lag_ms = _count(daemon.url)
        assert time.monotonic() - started < 2.5  # the wait is bounded: not the loader's 3 s
        assert count == 0 and lag_ms >= 100  # not loaded yet, and the answer says so
        deadline = time.monotonic() + 30
        while _count(daemon.url)[0] != 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _count(daemon.url) == (10, 0)
    finally:
        assert daemon.stop() == 0
