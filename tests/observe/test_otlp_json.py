"""OTLP/JSON (hex ids, integer enums, 64-bit ints as strings or numbers) is stored like protobuf."""

from __future__ import annotations

import pytest
from daemon_support import post, sql
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from otlp_bodies import NS, chat_span, kv, new_ids, request, to_json

COMPARED = (
    "trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, duration_ns, status_code, "
    "status_message, service_name, scope_name, operation, agent_name, request_model, input_tokens, "
    "output_tokens, run_id, probe, attributes, resource, events"
)


def _twin_bodies(int_as_string: bool):
    trace_id, root_id = new_ids()
    _, child_id = new_ids()
    root = Span(trace_id=trace_id, span_id=root_id, name="invoke_agent coder", kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=NS, end_time_unix_nano=NS + 9_000_000)
    root.attributes.extend([
        kv("gen_ai.operation.name", "invoke_agent"), kv("gen_ai.agent.name", "coder"),
        kv("lousho.run.id", f"run-twin-{int_as_string}"), kv("lousho.probe", True),
        kv("big.counter", 2**62 + 7), kv("ratio", 0.25),
    ])
    event = root.events.add(name="gen_ai.evaluation.result", time_unix_nano=NS + 8_000_000)
    event.attributes.extend([kv("gen_ai.evaluation.name", "tests"),
                             kv("gen_ai.evaluation.score.value", 1.0),
                             kv("gen_ai.evaluation.score.label", "pass")])
    child = chat_span(trace_id, child_id, parent=root_id)
    req = request([root, child])
    return trace_id.hex(), req.SerializeToString(), to_json(req, int_as_string)


@pytest.mark.system
@pytest.mark.parametrize("int_as_string", [True, False])
def test_json_body_is_stored_the_same_as_its_protobuf_twin(shared_daemon, int_as_string):
    url = shared_daemon.url
    proto_trace, proto_body, _ = _twin_bodies(int_as_string)
    json_trace, _, json_body = _twin_bodies(int_as_string)
    ok = post(url, "/v1/traces", proto_body, "application/x-protobuf")
    assert ok.status == 200 and ok.headers["content-type"] == "application/x-protobuf"
    assert not ExportTraceServiceResponse.FromString(ok.body).HasField("partial_success")
    ok = post(url, "/v1/traces", json_body, "application/json")
    assert ok.status == 200 and ok.headers["content-type"] == "application/json"
    assert ok.json() == {}

    def stored(trace: str) -> list[dict]:
        rows = sql(url, f"SELECT {COMPARED} FROM spans WHERE trace_id = ? ORDER BY parent_span_id NULLS FIRST", [trace])
        for row in rows:  # ids differ between the twins by construction; everything else must not
            for key in ("trace_id", "span_id", "parent_span_id"):
                row[key] = None if row[key] is None else "id"
        return rows

    proto_rows, json_rows = stored(proto_trace), stored(json_trace)
    assert len(proto_rows) == 2
    assert proto_rows == json_rows
    assert '"big.counter":4611686018427387911' in proto_rows[0]["attributes"]
    assert proto_rows[0]["probe"] is True
    scores = sql(url, "SELECT trace_id, passed FROM scores WHERE trace_id IN (?, ?) ORDER BY trace_id",
                 sorted([proto_trace, json_trace]))
    assert [s["passed"] for s in scores] == [True, True]


@pytest.mark.system
def test_application_protobuf_is_accepted_as_protobuf(shared_daemon):
    trace_id, span_id = new_ids()
    body = request([chat_span(trace_id, span_id)]).SerializeToString()
    reply = post(shared_daemon.url, "/v1/traces", body, "application/protobuf; charset=binary")
    assert reply.status == 200
    assert sql(shared_daemon.url, "SELECT count(*) AS n FROM spans WHERE trace_id = ?", [trace_id.hex()]) == [
        {"n": 1}
    ]


@pytest.mark.system
def test_aliases_of_openinference_and_older_genai_names_are_normalised(shared_daemon):
    trace_id, span_id = new_ids()
    span = Span(trace_id=trace_id, span_id=span_id, name="ChatCompletion", start_time_unix_nano=NS,
                end_time_unix_nano=NS + 1)
    span.attributes.extend([
        kv("openinference.span.kind", "LLM"), kv("llm.model_name", "gpt-4o"), kv("llm.provider", "openai"),
        kv("llm.token_count.prompt", 11), kv("llm.token_count.completion", 7), kv("session.id", "s-1"),
        kv("input.value", "hello"), kv("output.value", "hi"), kv("vendor.unknown.key", "kept"),
    ])
    _, tool_id = new_ids()
    tool = Span(trace_id=trace_id, span_id=tool_id, name="search", start_time_unix_nano=NS,
                end_time_unix_nano=NS + 1)
    tool.attributes.extend([kv("openinference.span.kind", "TOOL"), kv("tool.name", "search")])
    _, old_id = new_ids()
    old = Span(trace_id=trace_id, span_id=old_id, name="chat claude", start_time_unix_nano=NS,
               end_time_unix_nano=NS + 1)
    old.attributes.extend([kv("gen_ai.system", "anthropic"), kv("gen_ai.usage.prompt_tokens", 5),
                           kv("gen_ai.usage.completion_tokens", 3)])
    body = request([span, tool, old]).SerializeToString()
    assert post(shared_daemon.url, "/v1/traces", body, "application/x-protobuf").status == 200
    rows = sql(shared_daemon.url, "SELECT name, operation, request_model, provider, input_tokens, output_tokens, "
               "conversation_id, tool_name, input, output, attributes->>'vendor.unknown.key' AS kept "
               "FROM spans WHERE trace_id = ? ORDER BY name", [trace_id.hex()])
    assert rows == [
        {"name": "ChatCompletion", "operation": "chat", "request_model": "gpt-4o", "provider": "openai",
         "input_tokens": 11, "output_tokens": 7, "conversation_id": "s-1", "tool_name": None,
         "input": "hello", "output": "hi", "kept": "kept"},
        {"name": "chat claude", "operation": "chat", "request_model": None, "provider": "anthropic",
         "input_tokens": 5, "output_tokens": 3, "conversation_id": None, "tool_name": None,
         "input": None, "output": None, "kept": None},
        {"name": "search", "operation": "execute_tool", "request_model": None, "provider": None,
         "input_tokens": None, "output_tokens": None, "conversation_id": None, "tool_name": "search",
         "input": None, "output": None, "kept": None},
    ]
