"""The real OTel SDK exporters, HTTP/protobuf and gRPC, against a real daemon."""

from __future__ import annotations

import json

import pytest
from daemon_support import sql

from lousho.observe import instrument, record_score
from lousho.observe.client.workload import WorkloadPlan, emit_runs


@pytest.mark.system
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_every_span_from_the_sdk_exporter_arrives_once_with_promoted_columns(daemon, protocol):
    endpoint = daemon.url if protocol == "http/protobuf" else f"http://{daemon.grpc_target}"
    provider = instrument("exporter-test", endpoint, protocol=protocol)
    summary = emit_runs(provider, WorkloadPlan(runs=40, seed=3))
    provider.shutdown()

    rows = sql(daemon.url, "SELECT count(*) AS n, count(DISTINCT span_key) AS keys FROM spans")
    assert rows == [{"n": summary.spans, "keys": summary.spans}]
    runs = sql(daemon.url, "SELECT run_id FROM runs ORDER BY run_id")
    assert [r["run_id"] for r in runs] == sorted(summary.run_ids)

    chat = sql(daemon.url, "SELECT * FROM spans WHERE operation = 'chat' LIMIT 1")[0]
    attrs = json.loads(chat["attributes"])
    assert chat["kind"] == "CLIENT"
    assert chat["provider"] == "openai"
    assert chat["request_model"] == "gpt-test"
    assert chat["response_model"] == "gpt-test-2026"
    assert chat["input_tokens"] == attrs["gen_ai.usage.input_tokens"]
    assert chat["output_tokens"] == attrs["gen_ai.usage.output_tokens"]
    assert attrs["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chat["service_name"] == "exporter-test"
    assert chat["scope_name"] == "lousho.workload"
    assert len(chat["trace_id"]) == 32 and len(chat["span_id"]) == 16
    assert chat["trace_id"] == chat["trace_id"].lower()
    assert chat["parent_span_id"] is not None

    root = sql(daemon.url, "SELECT * FROM spans WHERE run_id = ?", [summary.run_ids[0]])[0]
    assert root["operation"] == "invoke_agent"
    assert root["agent_name"] == "coder"
    assert root["harness_revision"] == "rev-a1"
    assert root["run_kind"] == "send"
    assert root["conversation_id"] == "conv-0"
    assert root["parent_span_id"] is None
    assert json.loads(root["resource"])["service.name"] == "exporter-test"

    tool = sql(daemon.url, "SELECT tool_name, attributes FROM spans WHERE operation = 'execute_tool' LIMIT 1")
    assert tool[0]["tool_name"] == json.loads(tool[0]["attributes"])["gen_ai.tool.name"]


@pytest.mark.system
def test_scores_become_rows_and_give_the_run_its_verdict(daemon):
    provider = instrument("score-test", daemon.url)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent a", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a", "lousho.run.id": "r-pass",
    }) as span:
        record_score(span, "tests", 1.0, label="pass", explanation="all green")
    with tracer.start_as_current_span("invoke_agent a", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a", "lousho.run.id": "r-fail",
    }) as span:
        record_score(span, "tests", 0.0, label="fail", failed_check="test_add_months")
    with tracer.start_as_current_span("invoke_agent a", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a", "lousho.run.id": "r-none",
    }):
        pass
    provider.shutdown()

    scores = sql(daemon.url, "SELECT run_id, name, score_value, score_label, explanation, failed_check, "
                 "passed FROM scores ORDER BY run_id")
    assert scores == [
        {"run_id": "r-fail", "name": "tests", "score_value": 0.0, "score_label": "fail",
         "explanation": None, "failed_check": "test_add_months", "passed": False},
        {"run_id": "r-pass", "name": "tests", "score_value": 1.0, "score_label": "pass",
         "explanation": "all green", "failed_check": None, "passed": True},
    ]
    runs = sql(daemon.url, "SELECT run_id, agent, passed, status FROM runs ORDER BY run_id")
    assert runs == [
        {"run_id": "r-fail", "agent": "a", "passed": False, "status": "ok"},
        {"run_id": "r-none", "agent": "a", "passed": None, "status": "ok"},
        {"run_id": "r-pass", "agent": "a", "passed": True, "status": "ok"},
    ]
