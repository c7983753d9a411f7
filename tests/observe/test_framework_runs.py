"""The runs of agents built with the frameworks users run, as their instrumentations write them: span trees made
with the OTel SDK tracer carrying the exact attributes each one sets, exported by the SDK's OTLP exporter to a
daemon child. Sources of the attribute sets: openinference-instrumentation-openai-agents 2.6
(``_processor.py``: the trace's "Agent workflow" AGENT span, the agent's span with ``agent.name``, ``response``
LLM spans, function TOOL spans, ``"{message}: {data}"`` status descriptions and no exception event),
openinference-instrumentation-langchain 0.1.80 (``_tracer.py``: LangGraph's chain spans, ``"agent"`` in a run
name makes an AGENT span, ``messages`` serialised by ``message_to_dict``, a conditional edge's ``__end__``),
openinference-instrumentation-llama-index 4.6 (``_handler.py``: span names ``Class.method``, ``input.value`` the
call's bound arguments, the LLM kind of every method of an LLM instance, a result's repr as ``output.value``),
and the Vercel AI SDK's telemetry documentation (``ai.*`` keys, ``ai.operationId``, GenAI keys on ``do*``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
from daemon_support import sql
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

QUESTION = "What is the weather in Paris?"
ANSWER = "It is sunny in Paris."
SYSTEM = "You answer questions about the weather."


class Trees:
    """Span trees with explicit times (1 ms apart), so which span starts or ends last is the tree's own."""

    def __init__(self, url: str, service: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces")))
        self.tracer = self.provider.get_tracer("framework")
        self.clock = time.time_ns()

    def tick(self) -> int:
        self.clock += 1_000_000
        return self.clock

    @contextmanager
    def span(self, name: str, attrs: dict, *, error: str | None = None,
             exception: str | None = None) -> Iterator[trace.Span]:
        span = self.tracer.start_span(name, attributes=attrs, start_time=self.tick())
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield span
        if exception:
            span.add_event("exception", {"exception.type": exception, "exception.message": error or ""})
        span.set_status(Status(StatusCode.ERROR, error) if error else Status(StatusCode.OK))
        span.end(end_time=self.tick())

    def close(self) -> None:
        self.provider.shutdown()


def runs_of(url: str, agent: str, n: int) -> list[dict]:
    query = ("SELECT input, output, agent, model_calls, tool_calls, status, error_type, error_message FROM runs "
             "WHERE agent = ? ORDER BY started_ns")
    for _ in range(100):
        rows = sql(url, query, [agent])
        if len(rows) >= n:
            return rows
        time.sleep(0.05)
    raise AssertionError(f"runs of {agent}: {sql(url, query.replace('WHERE agent = ?', ''))}")


# --- OpenAI Agents SDK via openinference-instrumentation-openai-agents -----------------------------------------

def _response(t: Trees, text: str | None, *, error: str | None = None) -> None:
    attrs = {"openinference.span.kind": "LLM", "llm.system": "openai", "llm.model_name": "gpt-4o-mini",
             "input.value": json.dumps([{"role": "user", "content": QUESTION}]), "input.mime_type": "application/json",
             "llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": SYSTEM,
             "llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": QUESTION}
    if text is not None:
        output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]
        attrs |= {"output.value": json.dumps({"id": "resp_1", "object": "response", "output": output}),
                  "output.mime_type": "application/json", "llm.output_messages.0.message.role": "assistant",
                  "llm.output_messages.0.message.contents.0.message_content.type": "text",
                  "llm.output_messages.0.message.contents.0.message_content.text": text,
                  "llm.token_count.prompt": 40, "llm.token_count.completion": 8}
    elif error is None:
        attrs |= {"llm.output_messages.0.message.role": "assistant",
                  "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather"}
    with t.span("response", attrs, error=error):
        pass


def openai_agents_run(t: Trees, *, fail: bool) -> None:
    with t.span("Agent workflow", {"openinference.span.kind": "AGENT"}):
        error = "Error in agent run: Error code: 500 - {'error': 'the provider failed'}" if fail else None
        with t.span("Weather assistant", {"openinference.span.kind": "AGENT", "graph.node.id": "Weather assistant",
                                          "agent.name": "Weather assistant"}, error=error):
            _response(t, None)
            with t.span("get_weather", {"openinference.span.kind": "TOOL", "tool.name": "get_weather",
                                        "input.value": '{"city": "Paris"}', "output.value": "sunny"}):
                pass
            _response(t, None if fail else ANSWER, error=error)


@pytest.mark.system
def test_openai_agents_runs_are_named_for_the_agent_and_failures_have_an_error_type(shared_daemon) -> None:
    t = Trees(shared_daemon.url, "svc-openai-agents")
    try:
        openai_agents_run(t, fail=False)
        openai_agents_run(t, fail=True)
    finally:
        t.close()
    ok, failed = runs_of(shared_daemon.url, "Weather assistant", 2)
    assert (ok["input"], ok["output"], ok["status"]) == (QUESTION, ANSWER, "ok")
    assert (ok["model_calls"], ok["tool_calls"]) == (2, 1)
    # A status message naming no exception type, but the openai SDK's "Error code: 500": its class for it.
    assert failed["status"] == "error" and failed["error_type"] == "InternalServerError"
    assert failed["error_message"].startswith("Error in agent run")


# --- LangGraph create_react_agent via openinference-instrumentation-langchain ------------------------------------

def _lc(kind: str, content: str, **data: object) -> dict:
    return {"type": kind, "data": {"content": content, "type": kind, **data}}


def langgraph_run(t: Trees, question: str) -> None:
    human = _lc("human", question)
    call = _lc("ai", "", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"}])
    tool = _lc("tool", "sunny", tool_call_id="call_1")
    final = _lc("ai", ANSWER)
    metadata = json.dumps({"langgraph_step": 1, "langgraph_node": "agent"})

    def node(messages_in: list, message_out: dict, route: str, llm_out: dict) -> None:
        with t.span("agent", {"openinference.span.kind": "AGENT", "metadata": metadata,
                              "input.value": json.dumps({"messages": messages_in}),
                              "output.value": json.dumps({"messages": [message_out]}),
                              "input.mime_type": "application/json", "output.mime_type": "application/json"}):
            with t.span("ChatOpenAI", {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                                       "llm.provider": "openai", "llm.input_messages.0.message.role": "user",
                                       "llm.input_messages.0.message.content": question, **llm_out,
                                       "llm.token_count.prompt": 30, "llm.token_count.completion": 6}):
                pass
            with t.span("should_continue", {"openinference.span.kind": "CHAIN", "output.value": route,
                                            "input.value": json.dumps({"messages": messages_in + [message_out]})}):
                pass

    with t.span("weather_agent", {"openinference.span.kind": "AGENT",
                                  "input.value": json.dumps({"messages": [["user", question]]}),
                                  "output.value": json.dumps({"messages": [human, call, tool, final]}),
                                  "input.mime_type": "application/json", "output.mime_type": "application/json"}):
        node([human], call, "tools", {"llm.output_messages.0.message.role": "assistant",
                                      "llm.output_messages.0.message.tool_calls.0.tool_call.function.name":
                                      "get_weather"})
        with t.span("tools", {"openinference.span.kind": "CHAIN"}):
            with t.span("get_weather", {"openinference.span.kind": "TOOL", "tool.name": "get_weather",
                                        "input.value": "{'city': 'Paris'}", "output.value": "sunny"}):
                pass
        node([human, call, tool], final, "__end__", {"llm.output_messages.0.message.role": "assistant",
                                                     "llm.output_messages.0.message.content": ANSWER})


@pytest.mark.system
def test_langgraph_runs_answer_with_the_last_message_not_the_routing_edge(shared_daemon) -> None:
    t = Trees(shared_daemon.url, "svc-langgraph")
    try:
        langgraph_run(t, QUESTION)
    finally:
        t.close()
    [run] = runs_of(shared_daemon.url, "weather_agent", 1)
    assert (run["input"], run["output"]) == (QUESTION, ANSWER)
    assert (run["model_calls"], run["tool_calls"], run["status"]) == (2, 1, "ok")


def langgraph_tool_failure(t: Trees, graph: str) -> None:
    """create_react_agent's spans when the tool raises: the graph (a CHAIN when its name lacks "agent"), then its
    node "agent" (an AGENT span by its name alone) that ends OK before the tool's exception ends the graph."""
    graph_meta = json.dumps({"ls_integration": "langgraph"})

    def meta(step: int, node: str) -> str:
        return json.dumps({"ls_integration": "langgraph", "langgraph_step": step, "langgraph_node": node})

    error = "NoStationError('no station in Atlantis')"
    with t.span(graph, {"openinference.span.kind": "CHAIN", "metadata": graph_meta,
                        "input.value": json.dumps({"messages": [{"role": "user", "content": QUESTION}]})},
                error=error, exception="NoStationError"):
        with t.span("agent", {"openinference.span.kind": "AGENT", "metadata": meta(1, "agent")}):
            with t.span("ChatOpenAI", {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                                       "metadata": meta(1, "agent"), "llm.input_messages.0.message.role": "user",
                                       "llm.input_messages.0.message.content": QUESTION}):
                pass
        with t.span("tools", {"openinference.span.kind": "CHAIN", "metadata": meta(2, "tools")}, error=error,
                    exception="NoStationError"):
            with t.span("get_weather", {"openinference.span.kind": "TOOL", "tool.name": "get_weather",
                                        "metadata": meta(2, "tools")}, error=error, exception="NoStationError"):
                pass


@pytest.mark.system
def test_a_langgraph_node_named_agent_is_a_step_of_the_graph_which_is_the_run(shared_daemon) -> None:
    t = Trees(shared_daemon.url, "svc-langgraph-unnamed")
    try:
        langgraph_tool_failure(t, "forecaster")
        langgraph_tool_failure(t, "LangGraph")  # the default name names no agent: service.name does
    finally:
        t.close()
    for agent in ("forecaster", "svc-langgraph-unnamed"):
        [run] = runs_of(shared_daemon.url, agent, 1)
        assert (run["input"], run["status"], run["error_type"]) == (QUESTION, "error", "NoStationError"), run
        assert (run["model_calls"], run["tool_calls"]) == (1, 1), run
    assert sql(shared_daemon.url, "SELECT count(*) AS n FROM runs WHERE agent = 'agent'") == [{"n": 0}]


# --- LlamaIndex FunctionAgent via openinference-instrumentation-llama-index -------------------------------------
# As 4.6.1 traces llama-index-core 0.14.25: a step's input is its bound arguments with its event's repr, a step's
# and the run's output llama-index-workflows' summary of the event (cut at 200 characters with "..."); no span
# carries agent.name (the events say ``current_agent_name``); each model call is ``OpenAI._prepare_chat_with_tools``
# (an LLM span that only builds the request) beside the ``OpenAI.astream_chat`` that sends it.

def _summary(event: str) -> str:
    return event if len(event) <= 200 else event[:197] + "..."


def _llama_event(kind: str, body: str, agent: str | None) -> str:
    return f"{kind}({body}, current_agent_name='{agent}')" if agent else f"{kind}({body})"


def _llama_step(t: Trees, step: str, ev: str, out: str | None = None) -> AbstractContextManager[trace.Span]:
    attrs = {"openinference.span.kind": "CHAIN", "input.mime_type": "application/json",
             "input.value": json.dumps({"ctx": "<workflows.context.context.Context object at 0x7f>", "ev": ev})}
    return t.span(f"BaseWorkflowAgent.{step}", attrs if out is None else {**attrs, "output.value": _summary(out)})


def _llama_llm_call(t: Trees, out: dict, *, error: str | None = None) -> None:
    history = [f"ChatMessage(role=<MessageRole.USER: 'user'>, blocks=[TextBlock(block_type='text', "
               f"text='{QUESTION}')])"]
    with t.span("OpenAI._prepare_chat_with_tools", {
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini", "llm.provider": "openai",
            "input.value": json.dumps({"tools": ["<FunctionTool object>"], "user_msg": None, "chat_history": history,
                                       "verbose": False, "allow_parallel_tool_calls": True}),
            "input.mime_type": "application/json",
            "output.value": json.dumps({"messages": [{"role": "user", "content": QUESTION}],
                                        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
                                        "tool_choice": "auto"})}):
        pass
    with t.span("OpenAI.astream_chat", {
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini", "llm.provider": "openai",
            "input.value": json.dumps({"messages": history}), "input.mime_type": "application/json",
            "llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": SYSTEM,
            "llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": QUESTION, **out},
            error=error, exception="openai.InternalServerError" if error else None):
        pass


def llama_index_run(t: Trees, agent: str | None, *, fail: bool = False) -> None:
    """One ``agent.run(user_msg=QUESTION)``: a tool call, then the answer (or a 500 instead of it)."""
    message = f"ChatMessage(role=<MessageRole.USER: 'user'>, blocks=[TextBlock(block_type='text', text='{QUESTION}')])"
    agent_input = _llama_event("AgentInput", f"input=[{message}]", agent)
    answer = _llama_event("AgentOutput", "response=ChatMessage(role=<MessageRole.ASSISTANT: 'assistant'>, "
                          f"blocks=[TextBlock(block_type='text', text='{ANSWER}')]), structured_response=None", agent)
    stop = f"StopEvent(result={answer})"
    error = "Error code: 500 - {'error': 'the provider failed'}" if fail else None
    with t.span("FunctionAgent.run", {"openinference.span.kind": "CHAIN", "input.mime_type": "application/json",
                                      "input.value": json.dumps({"init_state": {"is_running": False}}),
                                      **({} if fail else {"output.value": _summary(stop)})},
                error=error, exception="openai.InternalServerError" if fail else None):
        with _llama_step(t, "init_run", "AgentWorkflowStartEvent()", agent_input):
            pass
        with _llama_step(t, "setup_agent", agent_input, f"AgentSetup(input=[{message}] * 40)"):
            pass
        with _llama_step(t, "run_agent_step", agent_input):
            _llama_llm_call(t, {"output.value": "assistant: ", "llm.output_messages.0.message.role": "assistant",
                                "llm.output_messages.0.message.contents.0.message_content.type": "text",
                                "llm.output_messages.0.message.contents.0.message_content.text": "",
                                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather"})
        with _llama_step(t, "call_tool", "ToolCall(tool_name='get_weather', tool_kwargs={'city': 'Paris'})",
                         "ToolCallResult(tool_name='get_weather', tool_kwargs={'city': 'Paris'}, tool_id='call_1')"):
            with t.span("FunctionTool.acall", {"openinference.span.kind": "TOOL", "tool.name": "get_weather",
                                               "input.value": json.dumps({"kwargs": {"city": "Paris"}}),
                                               "output.value": "sunny"}):
                pass
        with _llama_step(t, "run_agent_step", agent_input):
            if fail:
                _llama_llm_call(t, {}, error=error)
                return
            _llama_llm_call(t, {"output.value": f"assistant: {ANSWER}",
                                "llm.output_messages.0.message.role": "assistant",
                                "llm.output_messages.0.message.content": ANSWER})
        with _llama_step(t, "parse_agent_output", answer, stop):
            pass


@pytest.mark.system
def test_llama_index_runs_read_the_agent_the_question_the_answer_and_count_each_request_once(shared_daemon) -> None:
    t = Trees(shared_daemon.url, "svc-llama-index")
    try:
        llama_index_run(t, "llama-weather")
        llama_index_run(t, "llama-weather", fail=True)
        llama_index_run(t, None)  # events that name no agent: the class the root span names
    finally:
        t.close()
    ok, failed = runs_of(shared_daemon.url, "llama-weather", 2)
    assert (ok["input"], ok["output"], ok["status"]) == (QUESTION, ANSWER, "ok")
    assert (failed["input"], failed["output"], failed["status"]) == (QUESTION, None, "error")
    assert failed["error_type"] == "openai.InternalServerError"
    [unnamed] = runs_of(shared_daemon.url, "FunctionAgent", 1)
    assert (unnamed["input"], unnamed["output"]) == (QUESTION, ANSWER)
    for run in (ok, failed, unnamed):
        assert (run["model_calls"], run["tool_calls"]) == (2, 1), run


# --- the Vercel AI SDK's experimental_telemetry ----------------------------------------------------------------

def _ai(operation: str, agent: str = "weather-agent", **attrs: object) -> dict:
    return {"operation.name": f"{operation} {agent}", "ai.operationId": operation,
            "ai.telemetry.functionId": agent, "resource.name": agent,
            "ai.model.id": "gpt-4o-mini", "ai.model.provider": "openai.responses", **attrs}


def vercel_run(t: Trees, *, fail: bool, agent: str = "weather-agent", tools: list[str] | None = None) -> None:
    messages = json.dumps([{"role": "system", "content": SYSTEM},
                           {"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
    error = "Internal Server Error" if fail else None
    exception = "AI_APICallError" if fail else None

    def do_generate(**out: object) -> dict:
        return _ai("ai.generateText.doGenerate", agent, **{
            "ai.prompt.messages": messages, "ai.prompt.toolChoice": '{"type":"auto"}', "gen_ai.system":
            "openai.responses", "gen_ai.request.model": "gpt-4o-mini", **({"ai.prompt.tools": tools} if tools else {}),
            **out})

    root = _ai("ai.generateText", agent, **{"ai.prompt": json.dumps({"system": SYSTEM, "prompt": QUESTION})})
    if not fail:
        root |= {"ai.response.text": ANSWER, "ai.usage.inputTokens": 90, "ai.usage.outputTokens": 20}
    with t.span("ai.generateText", root, error=error, exception=exception):
        with t.span("ai.generateText.doGenerate", do_generate(**{
                "ai.response.toolCalls": json.dumps([{"toolName": "get_weather", "input": '{"city":"Paris"}'}]),
                "ai.usage.inputTokens": 40, "ai.usage.outputTokens": 12})):
            pass
        with t.span("ai.toolCall", _ai("ai.toolCall", agent, **{
                "ai.toolCall.name": "get_weather", "ai.toolCall.id": "c1", "ai.toolCall.args": '{"city":"Paris"}',
                "ai.toolCall.result": '"sunny"'})):
            pass
        last = {} if fail else {"ai.response.text": ANSWER, "ai.usage.inputTokens": 50, "ai.usage.outputTokens": 8}
        with t.span("ai.generateText.doGenerate", do_generate(**last), error=error, exception=exception):
            pass


@pytest.mark.system
def test_vercel_ai_sdk_runs_are_read_from_its_ai_attributes(shared_daemon) -> None:
    t = Trees(shared_daemon.url, "svc-vercel")
    try:
        vercel_run(t, fail=False)
        vercel_run(t, fail=True)
    finally:
        t.close()
    ok, failed = runs_of(shared_daemon.url, "weather-agent", 2)
    assert (ok["input"], ok["output"], ok["status"]) == (QUESTION, ANSWER, "ok")
    assert (ok["model_calls"], ok["tool_calls"]) == (2, 1)
    tokens = sql(shared_daemon.url, "SELECT input_tokens, output_tokens, model FROM runs WHERE agent = ? "
                                    "ORDER BY started_ns LIMIT 1", ["weather-agent"])
    assert tokens == [{"input_tokens": 90, "output_tokens": 20, "model": "gpt-4o-mini"}]  # the requests', once
    assert (failed["input"], failed["output"], failed["status"]) == (QUESTION, None, "error")
    assert failed["error_type"] == "AI_APICallError"


def _tool(description: str) -> str:
    return json.dumps({"type": "function", "name": "get_weather", "description": description,
                       "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}})


@pytest.mark.system
def test_vercel_ai_sdk_revision_is_its_model_calls_prompt_and_tools(shared_daemon) -> None:
    """The ai.generateText span names the model and the system prompt but not the tools, and the real SDK starts
    it in the same millisecond as its first request: the revision must come from the request (ai.prompt.tools),
    so a changed tool is a new revision and the same agent is one revision however the spans' times tie."""
    t = Trees(shared_daemon.url, "svc-vercel-tools")
    try:
        for description in ("The weather in a city.", "The weather in a city.", "The forecast for a city."):
            vercel_run(t, fail=False, agent="tools-agent", tools=[_tool(description)])
    finally:
        t.close()
    runs_of(shared_daemon.url, "tools-agent", 3)
    rows = sql(shared_daemon.url, "SELECT harness_revision, revision_source FROM runs WHERE agent = ? "
                                  "ORDER BY started_ns", ["tools-agent"])
    first, same, changed = (r["harness_revision"] for r in rows)
    assert {r["revision_source"] for r in rows} == {"derived"}
    assert first == same != changed


@pytest.mark.system
def test_a_failure_given_only_as_a_status_message_has_the_type_it_names(shared_daemon) -> None:
    t = Trees(shared_daemon.url, "svc-status-only")
    try:
        with t.span("invoke_agent status-only", {"gen_ai.operation.name": "invoke_agent",
                                                 "gen_ai.agent.name": "status-only"},
                    error="ValueError: no such city"):
            pass
    finally:
        t.close()
    [run] = runs_of(shared_daemon.url, "status-only", 1)
    assert (run["status"], run["error_type"]) == ("error", "ValueError")
