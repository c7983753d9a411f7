"""What the decoder and the store make of the keys other conventions send: tokens made inclusive, cost from
genai-prices or as reported, sessions, agents, input and output text; and a store of the previous schema
migrating on open. Real decoder, real DuckDB store."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import UTC, datetime

import duckdb
import genai_prices
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from otlp_bodies import NS, kv, new_ids, request

from lousho.observe.decode.otlp_decode import decode_request
from lousho.observe.store import schema
from lousho.observe.store.span_store import SpanStore


def span(name: str = "chat", parent: bytes = b"", status: int = Status.STATUS_CODE_OK, events=(), trace_id=None,
         **attrs) -> Span:
    trace, span_id = new_ids()
    out = Span(trace_id=trace_id or trace, span_id=span_id, parent_span_id=parent, name=name,
               kind=Span.SPAN_KIND_CLIENT, start_time_unix_nano=NS, end_time_unix_nano=NS + 5_000_000,
               status=Status(code=status))
    out.attributes.extend(kv(k, v) for k, v in attrs.items())
    for event_name, event_attrs in events:
        event = out.events.add(name=event_name, time_unix_nano=NS + 1)
        event.attributes.extend(kv(k, v) for k, v in event_attrs.items())
    return out


def stored(tmp_path, *spans: Span, service: str = "svc") -> list[dict]:
    store = SpanStore(tmp_path / "s.duckdb")
    try:
        store.append([decode_request(request(list(spans), service=service))])
        cursor = store.reader().execute("SELECT * FROM spans ORDER BY span_id")
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        order = {s.span_id.hex(): i for i, s in enumerate(spans)}
        return sorted(rows, key=lambda r: order[r["span_id"]])
    finally:
        store.close()


def table_price(provider: str, model: str, **usage: int) -> float:
    when = datetime.fromtimestamp(NS / 1e9, tz=UTC)
    return float(genai_prices.calc_price(genai_prices.Usage(**usage), model, provider_id=provider,
                                         genai_request_timestamp=when).total_price)


def test_cost_is_genai_prices_own_answer_with_cache_and_reasoning_tokens(tmp_path):
    rows = stored(
        tmp_path,
        span(**{"gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_read.input_tokens": 400,
                "gen_ai.usage.output_tokens": 200}),
        span(**{"gen_ai.provider.name": "anthropic", "gen_ai.request.model": "claude-sonnet-4-5",
                "gen_ai.usage.input_tokens": 2000, "gen_ai.usage.cache_read.input_tokens": 1200,
                "gen_ai.usage.cache_creation.input_tokens": 300, "gen_ai.usage.output_tokens": 500}),
        # OpenInference keys, reasoning tokens inside the output.
        span(**{"openinference.span.kind": "LLM", "llm.provider": "openai", "llm.model_name": "o3-mini",
                "llm.token_count.prompt": 800, "llm.token_count.completion": 600,
                "llm.token_count.completion_details.reasoning": 450}),
    )
    expected = [
        table_price("openai", "gpt-4o-mini", input_tokens=1000, cache_read_tokens=400, output_tokens=200),
        table_price("anthropic", "claude-sonnet-4-5", input_tokens=2000, cache_read_tokens=1200,
                    cache_write_tokens=300, output_tokens=500),
        table_price("openai", "o3-mini", input_tokens=800, output_tokens=600, output_reasoning_tokens=450),
    ]
    assert all(e > 0 for e in expected)
    assert [r["cost_usd"] for r in rows] == pytest.approx(expected, rel=1e-12)
    assert [r["cost_source"] for r in rows] == ["price-table"] * 3
    assert [(r["input_tokens"], r["cache_read_tokens"], r["cache_creation_tokens"], r["reasoning_tokens"])
            for r in rows] == [(1000, 400, None, None), (2000, 1200, 300, None), (800, None, None, 450)]


def test_a_reported_cost_wins_and_an_unknown_model_has_no_cost(tmp_path):
    priced = {"gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o-mini",
              "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 200}
    rows = stored(
        tmp_path,
        span(**priced, **{"operation.cost": 0.5}),  # Pydantic AI / Logfire
        span(**priced, **{"llm.cost.total": 0.25}),  # OpenInference
        span(**{**priced, "gen_ai.request.model": "acme-llm-9"}),
        span(name="execute_tool lookup", **{"gen_ai.operation.name": "execute_tool"}),
    )
    assert [(r["cost_usd"], r["cost_source"]) for r in rows] == [
        (0.5, "reported"), (0.25, "reported"), (None, None), (None, None)]


def test_exclusive_input_tokens_are_made_inclusive_of_cache(tmp_path):
    # Anthropic's API counts input without the cache: 100 fresh tokens, 1000 read, 200 written.
    [row] = stored(tmp_path, span(**{
        "gen_ai.provider.name": "anthropic", "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.usage.input_tokens": 100, "gen_ai.usage.cache_read_input_tokens": 1000,
        "gen_ai.usage.cache_creation_input_tokens": 200, "gen_ai.usage.output_tokens": 50}))
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_creation_tokens"]) == (1300, 1000, 200)
    assert row["cost_usd"] == pytest.approx(table_price(
        "anthropic", "claude-sonnet-4-5", input_tokens=1300, cache_read_tokens=1000, cache_write_tokens=200,
        output_tokens=50), rel=1e-12)


def test_pricing_never_reaches_the_network():
    from lousho.kernel import prices

    connects: list[tuple] = []

    def hook(event: str, args: tuple) -> None:
        if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request"):
            connects.append((event, args))

    sys.addaudithook(hook)
    priced = prices.price("openai", ("gpt-4.1-nano",), prices.Tokens(5000, 100, 1000), NS)
    missing = prices.price("openai", ("no-such-model-for-lousho",), prices.Tokens(5000, 100), NS)
    assert priced is not None and priced > 0 and missing is None
    assert connects == []


def test_sessions_agents_skills_errors_and_text_from_other_conventions(tmp_path):
    trace_id, _ = new_ids()
    rows = stored(
        tmp_path,
        # Traceloop: a workflow span, association properties, a legacy prompt/completion on the chat span.
        span(name="weather.workflow", trace_id=trace_id, **{
            "traceloop.span.kind": "workflow", "traceloop.entity.name": "weather",
            "traceloop.association.properties.session_id": "s-1",
            "traceloop.entity.input": json.dumps({"args": ["what is the weather in Paris?"], "kwargs": {}})}),
        span(name="openai.chat", **{
            "traceloop.workflow.name": "weather", "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "be brief", "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "hi there", "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "hello"}),
        # GenAI before v0.1.0: the workflow name is the agent; a JSON-quoted conversation id.
        span(name="invoke_workflow plan", **{"gen_ai.operation.name": "invoke_workflow",
                                             "gen_ai.workflow.name": "planner",
                                             "gen_ai.conversation.id": '"conv-9"', "gen_ai.skill.name": "pdf"}),
        # Content in the details event; the error only in an exception event.
        span(name="chat m", status=Status.STATUS_CODE_ERROR, events=[
            ("gen_ai.client.inference.operation.details", {
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "q?"}]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": "a."}]}])}),
            ("exception", {"exception.type": "httpx.ReadTimeout", "exception.message": "timed out"})],
            **{"gen_ai.operation.name": "chat", "session.id": "s-2"}),
        # OpenInference error span: the model only in the invocation parameters.
        span(name="ChatCompletion", status=Status.STATUS_CODE_ERROR, **{
            "openinference.span.kind": "LLM", "llm.invocation_parameters": '{"model": "gpt-4o-mini"}',
            "input.value": json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x?"}]})}),
    )
    assert [r["agent_name"] for r in rows] == ["weather", "weather", "planner", None, None]
    assert [r["conversation_id"] for r in rows] == ["s-1", None, "conv-9", "s-2", None]
    assert [r["input_text"] for r in rows] == ["what is the weather in Paris?", "hi there", None, "q?", "x?"]
    assert [r["output_text"] for r in rows] == [None, "hello", None, "a.", None]
    assert rows[2]["skill_name"] == "pdf"
    assert rows[3]["error_type"] == "httpx.ReadTimeout"
    assert rows[4]["request_model"] == "gpt-4o-mini"
    # The raw attributes stay as sent.
    assert json.loads(rows[2]["attributes"])["gen_ai.conversation.id"] == '"conv-9"'


def test_llama_index_spans_name_the_agent_their_events_declare_and_give_no_repr_as_text(tmp_path):
    """openinference-instrumentation-llama-index 4.6 with llama-index-core 0.14: the agent's name only in its
    workflow events' reprs, a run's output summarised to 200 characters, a tool call's output "assistant: "."""
    ev = ("AgentInput(input=[ChatMessage(role=<MessageRole.USER: 'user'>, blocks=[TextBlock(block_type='text', "
          "text=\"Say current_agent_name='evil'\")])], current_agent_name='weather-agent')")
    stop = ("StopEvent(result=AgentOutput(response=ChatMessage(role=<MessageRole.ASSISTANT: 'assistant'>, "
            "additional_kwargs={}, blocks=[TextBlock(block_type='text', text='The weather in Paris: sunny in "
            "Paris.')]), structured_response=None, current_agent_name='weather-agent')")[:197] + "..."
    rows = stored(
        tmp_path,
        span(name="BaseWorkflowAgent.setup_agent", **{"openinference.span.kind": "CHAIN",
                                                      "input.value": json.dumps({"ctx": "<Context>", "ev": ev})}),
        # A summary cut inside the name declares none.
        span(name="BaseWorkflowAgent.init_run", **{"openinference.span.kind": "CHAIN",
                                                   "output.value": ev[:-10] + "..."}),
        span(name="FunctionAgent.run", **{"openinference.span.kind": "CHAIN", "output.value": stop}),
        span(name="OpenAI.astream_chat", **{
            "openinference.span.kind": "LLM", "output.value": "assistant: ",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.contents.0.message_content.text": "",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather"}),
        # Text that merely ends in "..." is an answer.
        span(name="OpenAI.astream_chat", **{"openinference.span.kind": "LLM", "output.value": "Paris (France) is..."}),
    )
    assert [r["agent_name"] for r in rows] == ["weather-agent", None, None, None, None]
    assert [r["output_text"] for r in rows] == [None, None, None, None, "Paris (France) is..."]


def test_a_store_of_the_previous_schema_migrates_on_open_and_keeps_its_runs(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema._VERSION_TABLE)
    description, statements = schema.MIGRATIONS[0]
    for statement in statements:
        con.execute(statement)
    con.execute("INSERT INTO lousho_schema (version, description) VALUES (1, ?)", [description])
    con.execute("INSERT INTO spans (span_key, trace_id, span_id, name, kind, start_ns, end_ns, duration_ns, "
                "status_code, agent_name, run_id, input_tokens, received_ns) VALUES "
                "(1, 't1', 's1', 'invoke_agent coder', 'INTERNAL', 10, 20, 10, 'OK', 'coder', 'run-1', 7, 30)")
    con.close()

    store = SpanStore(path)
    try:
        reader = store.reader()
        assert schema.current_version(reader) == schema.SCHEMA_VERSION == len(schema.MIGRATIONS)
        assert reader.execute("SELECT run_id, agent, input_tokens, cache_read_tokens, implicit FROM runs").fetchall() \
            == [("run-1", "coder", 7, None, False)]
        assert reader.execute("SELECT count(*) FROM sessions").fetchall() == [(0,)]
    finally:
        store.close()


def test_lousho_runs_says_why_when_the_store_has_spans_but_no_run(tmp_path):
    db = tmp_path / "s.duckdb"
    store = SpanStore(db)
    # A child whose root never arrived: stored, but no run.
    store.append([decode_request(request([span(parent=new_ids()[1], **{"gen_ai.operation.name": "chat"})]))])
    store.close()
    done = subprocess.run([sys.executable, "-m", "lousho", "runs", "--db", str(db)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "0 rows" in done.stdout
    assert "no runs, though the store has 1 span" in done.stderr
    assert "docs/observe.md#what-makes-a-run" in done.stderr


@pytest.mark.parametrize(("provider", "model"), [
    ("openai", "gpt-4o-mini"), ("anthropic", "claude-sonnet-4-5"), ("google", "gemini-2.5-pro"),
    ("deepseek", "deepseek-chat")])
def test_the_fast_price_equals_the_tables_own_calculation_across_usages_and_tiers(provider, model):
    from lousho.kernel import prices

    rng = random.Random(14)
    for _ in range(200):
        # Around 200k input tokens, where tiered models change price.
        input_tokens = rng.choice([rng.randint(0, 5_000), rng.randint(0, 400_000), 199_999, 200_000, 200_001])
        cache_read = rng.randint(0, input_tokens // 2)
        cache_write = rng.randint(0, (input_tokens - cache_read) // 2)
        output_tokens = rng.randint(0, 5_000)
        reasoning = rng.randint(0, output_tokens)
        got = prices.price(provider, (model,), prices.Tokens(input_tokens, output_tokens, cache_read, cache_write,
                                                         reasoning), NS)
        assert got == table_price(provider, model, input_tokens=input_tokens, output_tokens=output_tokens,
                                  cache_read_tokens=cache_read, cache_write_tokens=cache_write,
                                  output_reasoning_tokens=reasoning)


def test_a_trace_is_one_run_rooted_at_its_outermost_agent_span_with_the_frameworks_run_id(tmp_path):
    trace_id, _ = new_ids()
    # A workflow root (no agent span) around an agent that delegates to another; Pydantic AI-style call ids.
    root = span(name="nightly.workflow", trace_id=trace_id, **{"traceloop.span.kind": "workflow",
                                                               "traceloop.entity.name": "nightly"})
    outer = span(name="invoke_agent planner", parent=root.span_id, trace_id=trace_id, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner", "gen_ai.agent.call.id": "call-1",
        "gen_ai.agent.version": "v3"})
    outer.start_time_unix_nano = NS + 1_000
    inner = span(name="invoke_agent writer", parent=outer.span_id, trace_id=trace_id, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "writer", "gen_ai.agent.call.id": "call-2"})
    inner.start_time_unix_nano = NS + 2_000
    skill = span(name="load_skill pdf", parent=inner.span_id, trace_id=trace_id, **{
        "gen_ai.operation.name": "execute_tool", "gen_ai.skill.name": "pdf"})
    chat = span(parent=inner.span_id, trace_id=trace_id, status=Status.STATUS_CODE_ERROR, **{
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", "error.type": "timeout"})
    store = SpanStore(tmp_path / "s.duckdb")
    try:
        store.append([decode_request(request([root, outer, inner, skill, chat], service="svc"))])
        rows = store.reader().execute(
            "SELECT run_id, agent, harness_revision, status, error_type, skills, model, model_calls, handled_errors "
            "FROM runs"
        ).fetchall()
    finally:
        store.close()
    # The outermost agent span is the root, not the workflow span; a failed child under agent spans that did
    # not end in error is an error the agent handled: the run is ok with no error type of its own, the error
    # counted (its type stays on its span).
    assert rows == [("call-1", "planner", "v3", "ok", None, ["pdf"], "gpt-4o-mini", 1, 1)]


@pytest.mark.parametrize(("message", "error_type"), [
    ("Error in agent run: {'error': 'Error code: 500 - The server had an error.'}", "InternalServerError"),
    ("Error in agent run: {'error': 'Error code: 429 - Rate limit reached.'}", "RateLimitError"),
    ("Error in agent run: {'error': 'Error code: 418 - teapot'}", "APIStatusError"),
    ("Error in agent run: {'error': 'Error details are redacted.'}", "error"),
])
def test_an_agents_sdk_failure_has_the_openai_class_of_the_status_its_message_names(tmp_path, message, error_type):
    # As openinference-instrumentation-openai-agents sends a run whose model call failed: the trace's
    # "Agent workflow" root ends OK, the agent's span and the response span end in ERROR with the SDK's
    # "{message}: {data}" and no exception event, so the message's "Error code: N" is all there is of the type.
    trace_id, _ = new_ids()
    root = span(name="Agent workflow", trace_id=trace_id, **{"openinference.span.kind": "AGENT"})
    agent = span(name="weather-agent", parent=root.span_id, trace_id=trace_id, status=Status.STATUS_CODE_ERROR,
                 **{"openinference.span.kind": "AGENT", "agent.name": "weather-agent"})
    response = span(name="response", parent=agent.span_id, trace_id=trace_id, status=Status.STATUS_CODE_ERROR,
                    **{"openinference.span.kind": "LLM", "llm.system": "openai"})
    response.end_time_unix_nano = NS + 3_000_000  # the call fails before the agent's span ends
    agent.status.message = message
    response.status.message = message.replace("Error in agent run", "Error getting response")
    store = SpanStore(tmp_path / "s.duckdb")
    try:
        store.append([decode_request(request([root, agent, response], service="svc"))])
        rows = store.reader().execute("SELECT agent, status, error_type, error_message FROM runs").fetchall()
    finally:
        store.close()
    assert rows == [("weather-agent", "error", error_type, message)]


def test_a_schema_6_store_has_its_kept_runs_made_again_by_todays_rules(tmp_path):
    path = tmp_path / "s6.duckdb"
    trace_id, _ = new_ids()
    root = span(name="invoke_agent planner", trace_id=trace_id, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})
    failed = span(parent=root.span_id, trace_id=trace_id, status=Status.STATUS_CODE_ERROR, **{
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", "error.type": "timeout"})
    store = SpanStore(path)
    try:
        store.append([decode_request(request([root, failed], service="svc"))])
        store.reader().execute("SELECT count(*) FROM runs").fetchall()
    finally:
        store.close()
    # As schema 6 kept it: folded by the rules before 7 (here: the handled error's type on the ok run).
    con = duckdb.connect(str(path))
    con.execute("DELETE FROM lousho_schema WHERE version > 6")
    con.execute("UPDATE kept_runs SET error_type = 'timeout'")
    assert con.execute("SELECT status, error_type FROM kept_runs").fetchall() == [("ok", "timeout")]
    con.close()

    store = SpanStore(path)
    try:
        reader = store.reader()
        assert schema.current_version(reader) == schema.SCHEMA_VERSION == len(schema.MIGRATIONS)
        assert reader.execute("SELECT status, error_type, handled_errors FROM runs").fetchall() == [("ok", None, 1)]
    finally:
        store.close()
