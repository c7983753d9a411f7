"""A span re-sent after the daemon restarted is still stored once, and counted once in its kept run."""

from __future__ import annotations

import pytest
from daemon_support import post, sql
from otlp_bodies import chat_span, kv, new_ids, request

from lousho.observe.client.process import start_daemon


@pytest.mark.system
@pytest.mark.slow
def test_a_request_resent_across_a_restart_is_stored_and_counted_once(tmp_path):
    trace_id, root_id = new_ids()
    # An agent span over four model calls (a model span nested in another would be the same request).
    root = chat_span(trace_id, root_id, **{"lousho.run.id": "resent-run", "gen_ai.operation.name": "invoke_agent"})
    event = root.events.add(name="gen_ai.evaluation.result")
    event.attributes.extend([kv("gen_ai.evaluation.name", "t"), kv("gen_ai.evaluation.score.label", "pass")])
    children = [chat_span(trace_id, new_ids()[1], parent=root_id) for _ in range(4)]
    first = request([root, *children[:2]]).SerializeToString()
    # The retry of a request whose ack was lost, with spans the first did not carry.
    second = request([root, *children]).SerializeToString()
    path = tmp_path / "o.duckdb"
    daemon = start_daemon(path)
    try:
        assert post(daemon.url, "/v1/traces", first, "application/x-protobuf").status == 200
        assert post(daemon.url, "/v1/traces", first, "application/x-protobuf").status == 200
    finally:
        assert daemon.stop() == 0
    daemon = start_daemon(path)
    try:
        assert post(daemon.url, "/v1/traces", second, "application/x-protobuf").status == 200
        assert post(daemon.url, "/v1/traces", first, "application/x-protobuf").status == 200
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": 5}]
        assert sql(daemon.url, "SELECT count(*) AS n FROM scores") == [{"n": 1}]
        assert sql(daemon.url, "SELECT run_id, model_calls, input_tokens, passed FROM runs") == [
            {"run_id": "resent-run", "model_calls": 4, "input_tokens": 5 * 120, "passed": True}]
    finally:
        assert daemon.stop() == 0
