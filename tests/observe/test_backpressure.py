"""A full spool answers 503 + Retry-After; the OTel exporters retry and nothing is lost.

The ack waits for the spool, not the store: with a slow store (``--commit-delay``) requests are acked at once
until the spool's bound (``--spool-mib``) is reached, then refused until the loader has caught up."""

from __future__ import annotations

import threading
import time

import pytest
from daemon_support import get, metric, post, sql
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.client.process import start_daemon


@pytest.mark.system
def test_a_full_spool_answers_503_with_retry_after_and_the_ack_never_waits_for_the_store(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb", "--spool-mib", "0.001", "--commit-delay", "1.5")
    try:
        first = request([chat_span(*new_ids()) for _ in range(20)]).SerializeToString()
        second = request([chat_span(*new_ids()) for _ in range(20)]).SerializeToString()
        started = time.monotonic()
        accepted = post(daemon.url, "/v1/traces", first, "application/x-protobuf")
        assert accepted.status == 200
        assert time.monotonic() - started < 1.0, "the ack waited for the store's 1.5 s load"
        refused = post(daemon.url, "/v1/traces", second, "application/x-protobuf")
        assert refused.status == 503
        assert refused.headers["retry-after"] == "1"
        assert "LOUSHO_OBSERVE_BUSY" in status_pb2.Status.FromString(refused.body).message
        assert metric(daemon.url, "lousho_requests_refused_full_total") >= 1
        assert metric(daemon.url, "lousho_spool_bytes") > len(first)
        # Read your acks: the query waits for the load of what was acked before it.
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": 20}]
    finally:
        assert daemon.stop() == 0


@pytest.mark.system
@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_slow_writer_makes_exporters_retry_and_no_span_is_lost(tmp_path, protocol):
    daemon = start_daemon(tmp_path / "o.duckdb", "--spool-mib", "0.02", "--commit-delay", "0.15")
    try:
        def work(worker: int) -> None:
            if protocol == "http":
                exporter = HttpExporter(endpoint=f"{daemon.url}/v1/traces", timeout=60)
            else:
                exporter = GrpcExporter(endpoint=daemon.grpc_target, insecure=True, timeout=60)
            provider = TracerProvider(resource=Resource.create({"service.name": f"w{worker}"}))
            provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=64,
                                                           schedule_delay_millis=50, max_queue_size=10_000))
            tracer = provider.get_tracer("bp")
            for i in range(300):
                with tracer.start_as_current_span(f"chat {i}", attributes={"gen_ai.operation.name": "chat"}):
                    pass
            # Wait for every export however slow the machine: shutdown alone gives up after 30 s and drops
            # what is still queued, a loss of the SDK's, not the daemon's.
            assert provider.force_flush(timeout_millis=150_000)
            provider.shutdown()

        workers = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(180)
        assert metric(daemon.url, "lousho_requests_refused_full_total") > 0, "the spool never filled"
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": 4 * 300}], (
            get(daemon.url, "/metrics").body.decode() + "\n".join(daemon.output[-40:]))
    finally:
        assert daemon.stop() == 0
