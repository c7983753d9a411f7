"""Clients re-send when unsure: a span seen twice (same trace_id, span_id) is stored once."""

from __future__ import annotations

import grpc
import pytest
from daemon_support import get, post, sql
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from otlp_bodies import chat_span, kv, new_ids, request


@pytest.mark.system
def test_resent_spans_are_stored_once_over_http_and_grpc(daemon):
    trace_id, root_id = new_ids()
    spans = [chat_span(trace_id, root_id, **{"lousho.run.id": "dup-run"})]
    event = spans[0].events.add(name="gen_ai.evaluation.result")
    event.attributes.extend([kv("gen_ai.evaluation.name", "t"), kv("gen_ai.evaluation.score.label", "pass")])
    spans += [chat_span(trace_id, new_ids()[1], parent=root_id) for _ in range(9)]
    req = request(spans)
    body = req.SerializeToString()
    for _ in range(3):
        assert post(daemon.url, "/v1/traces", body, "application/x-protobuf").status == 200
    with grpc.insecure_channel(daemon.grpc_target) as channel:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(req, timeout=10)
    # Inside one request a repeat is no retry: the first copy is a resend (stored once), the second refused.
    doubled = post(daemon.url, "/v1/traces", request(spans + spans).SerializeToString(), "application/x-protobuf")
    assert doubled.status == 200
    assert ExportTraceServiceResponse.FromString(doubled.body).partial_success.rejected_spans == 10

    assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": 10}]
    assert sql(daemon.url, "SELECT count(*) AS n FROM scores") == [{"n": 1}]
    assert sql(daemon.url, "SELECT attempts, passed FROM runs") == [{"attempts": 1, "passed": True}]
    metrics = get(daemon.url, "/metrics").body.decode()
    assert "lousho_spans_accepted_total 10" in metrics
    assert "lousho_spans_duplicate_total 40" in metrics and "lousho_spans_rejected_total 10" in metrics
