"""What a run needs from a span that carries no ``lousho.*`` attribute, read from the conventions the
ecosystem sends: OTel GenAI (v0.1.0 and before), OpenInference, Traceloop/OpenLLMetry, Pydantic AI/Logfire.

``normalise.promote`` fills the columns whose keys are plain aliases; ``refine`` runs after it on the same
span and fills what needs more than a key lookup: the agent named by a span kind, a span name or a LlamaIndex
workflow's events, the framework's own run id, tokens made inclusive of cache, the error type of an ``exception``
event, the model of an OpenInference error span, the user's input and the assistant's output as text, the
session id unquoted, the skill, and the cost. A key we do not know changes nothing; the raw attributes stay as sent.
docs/observe.md "What makes a run" is the table of these keys.
"""

from __future__ import annotations

import json
import re
from typing import Any

from lousho.kernel import prices
from lousho.observe.runs import fingerprint

# Columns this module adds to a span row (schema migration 2), in table order.
TEXT_COLUMNS = ("call_id", "cost_source", "skill_name", "input_text", "output_text")
TOKEN_COLUMNS = ("cache_read_tokens", "cache_creation_tokens", "reasoning_tokens")
# Schema migration 6: what a run's revision is derived from (fingerprint.py), and "version" on a span whose
# harness_revision is its gen_ai.agent.version.
REVISION_COLUMNS = ("fingerprint", "revision_source")

# First key present wins. Names at the left are the current GenAI conventions.
_AGENT_KEYS = ("gen_ai.workflow.name", "traceloop.workflow.name", "agent_name")
_TRACELOOP_AGENT_KINDS = frozenset({"workflow", "agent"})
_REVISION_KEYS = ("gen_ai.agent.version",)
_CALL_ID_KEYS = ("gen_ai.agent.call.id",)
_SESSION_KEYS = (
    "traceloop.association.properties.session_id",
    "traceloop.association.properties.conversation_id",
    "traceloop.association.properties.thread_id",
    "traceloop.correlation.id",
)
_INPUT_TOKEN_KEYS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "llm.usage.prompt_tokens",
)
_OUTPUT_TOKEN_KEYS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "llm.usage.completion_tokens",
)
_CACHE_READ_KEYS = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt_details.cache_read",
)
_CACHE_CREATION_KEYS = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
    "llm.token_count.prompt_details.cache_write",
)
_REASONING_KEYS = (
    "gen_ai.usage.reasoning.output_tokens",
    "gen_ai.usage.reasoning_tokens",
    "llm.token_count.completion_details.reasoning",
    "llm.usage.reasoning_tokens",
)
# No convention carries cost; these are the keys instrumentations report it under.
_COST_KEYS = ("lousho.cost.usd", "gen_ai.usage.cost", "operation.cost", "llm.cost.total")
_SKILL_KEYS = ("gen_ai.skill.name",)
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_INPUT_KEYS = ("gen_ai.input.messages", "ai.prompt.messages", "ai.prompt", "input.value", "traceloop.entity.input",
               "pydantic_ai.all_messages")
_OUTPUT_KEYS = ("gen_ai.output.messages", "ai.response.text", "output.value", "traceloop.entity.output",
                "final_result")
# The Vercel AI SDK's usage keys (v4, then v5), read on its requests to the model when no GenAI key is there.
_AI_USAGE_KEYS = (("ai.usage.promptTokens", "ai.usage.inputTokens"),
                  ("ai.usage.completionTokens", "ai.usage.outputTokens"))
# A LangChain message's type, as its role.
_LANGCHAIN_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
                    "HumanMessage": "user", "AIMessage": "assistant", "SystemMessage": "system",
                    "ToolMessage": "tool"}
# Keys under which a framework's bound arguments carry the user's input (LlamaIndex's span input is every
# argument of the call: ``user_msg`` is the question, ``kwargs`` may hold ``tool_choice``).
_QUESTION_KEYS = ("user_msg", "input", "query", "query_str", "question", "message", "prompt", "user_input",
                  "messages", "inputs")
_ANSWER_KEYS = ("output", "outputs", "answer", "response", "result", "final_output", "text", "content")
# LangGraph's routing sentinels: a conditional edge's output, never an answer.
_ROUTING_VALUES = frozenset({"__end__", "__start__"})
# A compiled LangGraph graph's name when none was given (StateGraph.compile, create_react_agent, create_agent):
# it names the framework, not the agent.
_LANGGRAPH_DEFAULT_NAME = "LangGraph"
# ``ls_integration`` of a graph's run: LangGraph's own, and LangChain's create_agent.
_LANGGRAPH_INTEGRATIONS = frozenset({"langgraph", "langchain_create_agent"})
# The operations of a graph's and its nodes' spans (OpenInference CHAIN or AGENT).
_GRAPH_OPERATIONS = frozenset({"invoke_agent", "invoke_workflow"})
_ASSISTANT_ROLES = frozenset({"assistant", "model", "ai"})
_TEXT_PARTS = frozenset({"text", "output_text", "input_text"})
_MAX_CONTENTS = 16
# LlamaIndex's agent workflows (FunctionAgent, ReActAgent, AgentWorkflow) declare the agent's name only in their
# events (AgentInput, AgentSetup, AgentOutput), whose repr is in the input or output of a workflow step's CHAIN
# span: openinference-instrumentation-llama-index sets no ``agent.name``.
_WORKFLOW_AGENT_KEYS = ("input.value", "output.value")
# A repr's first field: ``result=`` in ``StopEvent(result=...``.
_FIELD = re.compile(r"[A-Za-z_]\w*=")
# The event's own field (after "(" or ", ", before ")" or the next field), not the words of a message's text.
_WORKFLOW_AGENT = re.compile(r"[(,] ?current_agent_name='([^'\\\n]{1,256})'(?=\)|, \w+=)")


# Index 0 of the messages other conventions flatten into keys: their presence says there are some.
_FLAT_INPUT_KEYS = ("llm.input_messages.0.message.role", "llm.input_messages.0.message.content",
                    "gen_ai.prompt.0.role", "gen_ai.prompt.0.content")
_FLAT_OUTPUT_KEYS = ("llm.output_messages.0.message.role", "llm.output_messages.0.message.content",
                     "gen_ai.completion.0.role", "gen_ai.completion.0.content")
_USAGE_FAMILY = frozenset(k for pair in _AI_USAGE_KEYS for k in pair)
_AGENT_FAMILY = frozenset((*_AGENT_KEYS, "traceloop.span.kind", "openinference.span.kind"))
_TOKEN_FAMILY = frozenset(("llm.usage.prompt_tokens", "llm.usage.completion_tokens", *_CACHE_READ_KEYS,
                           *_CACHE_CREATION_KEYS, *_REASONING_KEYS))
_INPUT_FAMILY = frozenset((*_INPUT_KEYS, *_FLAT_INPUT_KEYS))
_OUTPUT_FAMILY = frozenset((*_OUTPUT_KEYS, *_FLAT_OUTPUT_KEYS))
# Every key refine reads: one set intersection per span tells which of its steps have anything to do,
# so a span of keys it does not know costs about a microsecond (docs/performance.md).
_WATCHED = frozenset((*_AGENT_FAMILY, *_REVISION_KEYS, "llm.invocation_parameters", *_SESSION_KEYS,
                      *_CALL_ID_KEYS, *_SKILL_KEYS, *_TOKEN_FAMILY, "operation.cost", *_INPUT_FAMILY,
                      *_OUTPUT_FAMILY, *_USAGE_FAMILY, *fingerprint.KEYS))
# The keys that may give a span a fingerprint: its instructions, messages or tools.
_PRINT_FAMILY = frozenset((*fingerprint.KEYS, *_INPUT_FAMILY))
WATCHED_KEYS = _WATCHED
# The keys of messages refine reads only for a span without lousho.run.id, and the event carrying them.
MESSAGE_KEYS = _INPUT_FAMILY | _OUTPUT_FAMILY
DETAILS_EVENT = _DETAILS_EVENT


def refine(cols: dict[str, list[Any]], attrs: dict[str, Any], events: list[dict[str, Any]], span_name: str,
           start_ns: int) -> None:
    """Fill this module's columns for the span just appended to ``cols`` (its values are the last ones),
    and complete the promoted columns ``normalise`` left empty."""
    present = _WATCHED.intersection(attrs)
    revision_source = None
    operation = cols["operation"][-1]
    agents = cols["agent_name"]
    if "metadata" in attrs and "openinference.span.kind" in present:
        operation = _langgraph(cols, attrs["metadata"], span_name, operation)
    if agents[-1] is None and (operation == "invoke_agent" or (present and not present.isdisjoint(_AGENT_FAMILY))):
        agents[-1] = _agent(attrs, span_name, operation)
    sessions = cols["conversation_id"]
    if present:
        if "gen_ai.agent.version" in present and cols["harness_revision"][-1] is None:
            cols["harness_revision"][-1] = _first_text(attrs, _REVISION_KEYS)
            revision_source = "version"
        if "llm.invocation_parameters" in present and cols["request_model"][-1] is None:
            cols["request_model"][-1] = _invocation_model(attrs)
        if sessions[-1] is None and not present.isdisjoint(_SESSION_KEYS):
            sessions[-1] = _first_text(attrs, _SESSION_KEYS)
    session = sessions[-1]
    if session is not None and session[:1] == '"':
        sessions[-1] = _unquote(session)
    if events and cols["error_type"][-1] is None:
        cols["error_type"][-1] = _exception_type(events)
    cols["call_id"].append(_first_text(attrs, _CALL_ID_KEYS) if "gen_ai.agent.call.id" in present else None)
    cols["skill_name"].append(_first_text(attrs, _SKILL_KEYS) if "gen_ai.skill.name" in present else None)

    # A span with lousho.run.id keeps its run's input and output in the `input`/`output` columns, as before
    # (runs_view reads those for such runs): no message parsing for it.
    details = _details(events) if events else None
    cols["revision_source"].append(revision_source)
    # A tool's arguments and result are neither the user's question nor the agent's answer.
    if (details is None and not present) or cols["run_id"][-1] is not None or operation == "execute_tool":
        cols["input_text"].append(None)
        cols["output_text"].append(None)
        cols["fingerprint"].append(None)
    else:
        has_print = details is not None or not present.isdisjoint(_PRINT_FAMILY)
        cols["fingerprint"].append(
            fingerprint.fingerprint(attrs, details, cols["request_model"][-1]) if has_print else None)
        has_input = details is not None or not present.isdisjoint(_INPUT_FAMILY)
        cols["input_text"].append(input_text(attrs, details) if has_input else None)
        has_output = details is not None or not present.isdisjoint(_OUTPUT_FAMILY)
        cols["output_text"].append(output_text(attrs, details) if has_output else None)

    input_tokens = cols["input_tokens"][-1]
    output_tokens = cols["output_tokens"][-1]
    cache_read = cache_creation = reasoning = None
    if operation == "chat" and present and not present.isdisjoint(_USAGE_FAMILY):
        # Only on a request to the model: the SDK's generateText span repeats the sum of its requests.
        if input_tokens is None:
            input_tokens = cols["input_tokens"][-1] = _first_int(attrs, _AI_USAGE_KEYS[0])
        if output_tokens is None:
            output_tokens = cols["output_tokens"][-1] = _first_int(attrs, _AI_USAGE_KEYS[1])
    if present and not present.isdisjoint(_TOKEN_FAMILY):
        input_tokens = _first_int(attrs, _INPUT_TOKEN_KEYS)
        output_tokens = _first_int(attrs, _OUTPUT_TOKEN_KEYS)
        cache_read = _first_int(attrs, _CACHE_READ_KEYS)
        cache_creation = _first_int(attrs, _CACHE_CREATION_KEYS)
        reasoning = _first_int(attrs, _REASONING_KEYS)
        input_tokens = inclusive_input(input_tokens, cache_read, cache_creation)
        cols["input_tokens"][-1] = input_tokens
        cols["output_tokens"][-1] = output_tokens
    cols["cache_read_tokens"].append(cache_read)
    cols["cache_creation_tokens"].append(cache_creation)
    cols["reasoning_tokens"].append(reasoning)

    reported = cols["cost_usd"][-1]
    if reported is None and "operation.cost" in present:
        reported = _first_float(attrs, _COST_KEYS)
    if reported is not None:
        cols["cost_usd"][-1] = reported
        cols["cost_source"].append("reported")
        return
    priced = None
    if input_tokens is not None or output_tokens is not None:
        priced = table_price(cols["provider"][-1], cols["response_model"][-1], cols["request_model"][-1],
                             input_tokens, output_tokens, cache_read, cache_creation, reasoning, start_ns)
    cols["cost_usd"][-1] = priced
    cols["cost_source"].append("price-table" if priced is not None else None)


def table_price(provider: str | None, response_model: str | None, request_model: str | None,
                input_tokens: int | None, output_tokens: int | None, cache_read: int | None,
                cache_creation: int | None, reasoning: int | None, start_ns: int) -> float | None:
    """The price table's cost of a call that reports none (the native decoder calls this too)."""
    models = (response_model, request_model)
    if prices.known_unpriced(provider, models):
        return None
    return prices.price(provider, models, prices.Tokens(input_tokens or 0, output_tokens or 0, cache_read or 0,
                                                    cache_creation or 0, reasoning or 0), start_ns)


def inclusive_input(input_tokens: int | None, cache_read: int | None, cache_creation: int | None) -> int | None:
    """Input tokens including cache reads and writes, as the GenAI conventions define them.

    Anthropic's API (and instrumentations that copy it) count input without cache. An input count smaller
    than the cache tokens it must contain can only be that exclusive count, so the cache is added; an
    exclusive count at least as large as its cache cannot be told apart and is kept as sent."""
    cached = (cache_read or 0) + (cache_creation or 0)
    if not cached:
        return input_tokens
    if input_tokens is None:
        return cached
    return input_tokens + cached if input_tokens < cached else input_tokens


def input_text(attrs: dict[str, Any], details: dict[str, Any] | None = None) -> str | None:
    """The first user message of a span's input, as text. The messages sent to a model (flattened
    OpenInference or legacy GenAI keys) come before a framework's ``input.value``, which may be every
    argument of the call."""
    flat = _flat_messages(attrs, "llm.input_messages.{}.message.") or _flat_messages(attrs, "gen_ai.prompt.{}.")
    text = _first_user(flat) if flat else None
    if text is not None:
        return text
    for source in _input_sources(attrs, details):
        text = _first_user(source)
        if text is not None:
            return text
    return None


def output_text(attrs: dict[str, Any], details: dict[str, Any] | None = None) -> str | None:
    """The last assistant message of a span's output, as text: never a routing edge's value (LangGraph's
    ``__end__``) nor a Python repr (LlamaIndex's ``StopEvent(...)``), which are not answers."""
    flat = _flat_messages(attrs, "llm.output_messages.{}.message.") or _flat_messages(attrs, "gen_ai.completion.{}.")
    # The messages a model answered are its output: one without text (a tool call) has no answer, whatever
    # the span's output.value says (LlamaIndex's is ``str(ChatResponse)``, "assistant: ").
    sources: list[Any] = [flat] if flat else _output_sources(attrs, details)
    for source in sources:
        text = _last_assistant(source)
        if text is not None and text not in _ROUTING_VALUES and not _is_repr(text):
            return text
    return None


def _is_repr(text: str) -> bool:
    """A Python object's repr (``StopEvent(result=...)``, ``AgentOutput(...)``), not text for a person; or its
    summary cut short: llama-index-workflows gives a step's or a run's result as ``StopEvent(result=...``
    truncated to 200 characters with "..." (``summarize_event``)."""
    head, paren, rest = text.partition("(")
    if not (paren and head.replace(".", "").replace("_", "").isalnum() and head[:1].isupper() and "\n" not in head):
        return False
    return text.endswith(")") or (text.endswith("...") and _FIELD.match(rest) is not None)

def _input_sources(attrs: dict[str, Any], details: dict[str, Any] | None) -> list[Any]:
    sources = [attrs[k] for k in _INPUT_KEYS if k in attrs]
    if details and "gen_ai.input.messages" in details:
        sources.insert(0, details["gen_ai.input.messages"])
    return sources


def _output_sources(attrs: dict[str, Any], details: dict[str, Any] | None) -> list[Any]:
    sources = [attrs[k] for k in _OUTPUT_KEYS if k in attrs]
    if details and "gen_ai.output.messages" in details:
        sources.insert(0, details["gen_ai.output.messages"])
    return sources


def _first_user(source: Any) -> str | None:
    """The first user message's text; a plain string (OpenInference text/plain, a Traceloop argument) is the
    user's input itself."""
    parsed = _parse(source)
    if isinstance(parsed, str):
        return parsed.strip() or None
    for message in _messages(parsed):
        if _role(message) == "user":
            text = _text(message)
            if text:
                return text
    if isinstance(parsed, dict):
        return _argument_text(parsed, _QUESTION_KEYS)
    return None


def _last_assistant(source: Any) -> str | None:
    parsed = _parse(source)
    if isinstance(parsed, str):
        return parsed.strip() or None
    messages = _messages(parsed)
    for message in reversed(messages):
        role = _role(message)
        if role is None or role in _ASSISTANT_ROLES:
            text = _text(message)
            if text:
                return text
    if isinstance(parsed, dict) and not messages:
        return _argument_text(parsed, _ANSWER_KEYS)
    return None


def _parse(value: Any) -> Any:
    if isinstance(value, str):
        stripped = value.lstrip()
        if stripped[:1] in ("[", "{", '"'):
            try:
                return json.loads(value)
            except ValueError:
                return value
    return value


def _messages(doc: Any) -> list[dict[str, Any]]:
    """The messages of a GenAI message list, an OpenAI request (``messages``), response (``choices``) or
    Responses API response (``output`` items), the AI SDK's prompt (``system``/``prompt``/``messages``), or an
    Anthropic-style single message. LangChain messages (``{"type": "human", "data": {...}}``, their
    constructor form, ``("user", "text")`` pairs) are read as the messages they are."""
    if isinstance(doc, list):
        return [m for m in (_message(item) for item in doc) if m is not None]
    if not isinstance(doc, dict):
        return []
    if isinstance(doc.get("messages"), list):
        return _messages(doc["messages"])
    if isinstance(doc.get("choices"), list):
        return [c["message"] for c in doc["choices"] if isinstance(c, dict) and isinstance(c.get("message"), dict)]
    if isinstance(doc.get("output"), list) and doc.get("object") == "response":
        return [m for m in doc["output"] if isinstance(m, dict) and m.get("type") == "message"]
    if isinstance(doc.get("prompt"), str):
        return [{"role": "user", "content": doc["prompt"]}]
    if isinstance(doc.get("prompt"), list):
        return _messages(doc["prompt"])
    message = _message(doc)
    return [message] if message is not None and ("content" in message or "parts" in message
                                                  or "blocks" in message) else []


def _message(item: Any) -> dict[str, Any] | None:
    """One message as a dict with a role, from any of the shapes ``_messages`` reads."""
    if isinstance(item, list | tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
        return {"role": _LANGCHAIN_ROLES.get(item[0], item[0]), "content": item[1]}
    if not isinstance(item, dict):
        return None
    if "role" in item:
        return item
    data = item.get("data") if isinstance(item.get("data"), dict) else item.get("kwargs")
    kind = item.get("type")
    if item.get("type") == "constructor" and isinstance(item.get("id"), list) and item["id"]:
        kind = item["id"][-1]
    if isinstance(data, dict) and isinstance(kind, str) and kind in _LANGCHAIN_ROLES:
        return {**data, "role": _LANGCHAIN_ROLES[kind]}
    if isinstance(kind, str) and kind in _LANGCHAIN_ROLES and "content" in item:
        return {**item, "role": _LANGCHAIN_ROLES[kind]}
    return None


def _role(message: dict[str, Any]) -> str | None:
    role = message.get("role")
    if role is None:
        return None
    # LlamaIndex's MessageRole may arrive as its value or as "MessageRole.USER".
    role = str(role).rsplit(".", 1)[-1].lower()
    return _LANGCHAIN_ROLES.get(role, role)


def _text(message: dict[str, Any]) -> str | None:
    """A message's text: a string ``content``, or the text of its ``content``/``parts`` list."""
    content = message.get("content")
    if isinstance(content, str):
        return content.strip() or None
    parts = (message.get("parts") or message.get("blocks")) if content is None else content
    if not isinstance(parts, list):
        return None
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type", part.get("block_type", "text")) in _TEXT_PARTS:
            text = part.get("content", part.get("text"))
            if isinstance(text, str):
                texts.append(text)
    joined = "\n".join(t for t in texts if t).strip()
    return joined or None


def _argument_text(doc: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """A call's arguments as text: the user's input among a framework's bound arguments (``user_msg``,
    ``input``, ``query``...: never another keyword such as ``tool_choice``), else the first string argument
    of a Traceloop entity input/output (``{"args": [...], "kwargs": {...}}``)."""
    for key in keys:
        value = doc.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, dict):
            message = _message(value)
            text = _text(message) if message is not None else None
            if text:
                return text
    if not set(doc) <= {"args", "kwargs"}:
        return None
    for key in ("args", "kwargs"):
        text = _first_string(doc.get(key))
        if text is not None:
            return text
    return None


def _first_string(value: Any) -> str | None:
    values = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
    for item in values:
        if isinstance(item, str) and item.strip():
            return item.strip()
    return None


def _flat_messages(attrs: dict[str, Any], pattern: str) -> list[dict[str, Any]]:
    """Messages flattened into indexed keys (OpenInference ``llm.input_messages.0.message.role``, legacy
    ``gen_ai.prompt.0.role``)."""
    out = []
    index = 0
    while True:
        prefix = pattern.format(index)
        role = attrs.get(prefix + "role")
        content = attrs.get(prefix + "content")
        if content is None:
            # OpenInference's list content: ``message.contents.N.message_content.text``.
            content = [attrs.get(f"{prefix}contents.{i}.message_content.text") for i in range(_MAX_CONTENTS)
                       if f"{prefix}contents.{i}.message_content.text" in attrs] or None
        if role is None and content is None:
            return out
        out.append({"role": role, "content": content})
        index += 1


def _details(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    for event in events:
        if event["name"] == _DETAILS_EVENT:
            return event["attributes"]
    return None


def _agent(attrs: dict[str, Any], span_name: str, operation: str | None) -> str | None:
    name = _first_text(attrs, _AGENT_KEYS)
    if name is not None:
        return name
    kind = attrs.get("traceloop.span.kind")
    if isinstance(kind, str) and kind in _TRACELOOP_AGENT_KINDS:
        entity = attrs.get("traceloop.entity.name")
        if isinstance(entity, str) and entity:
            return entity
    # The conventions name an agent span "invoke_agent {gen_ai.agent.name}".
    if operation == "invoke_agent" and span_name.startswith("invoke_agent "):
        return span_name[len("invoke_agent "):].strip() or None
    if operation == "invoke_workflow":
        return _workflow_agent(attrs)
    return None


def _workflow_agent(attrs: dict[str, Any]) -> str | None:
    """The agent a LlamaIndex workflow event names (``AgentInput(input=[...], current_agent_name='x')``). The
    last mention: the field follows the event's messages, whose text the user and the model write."""
    for key in _WORKFLOW_AGENT_KEYS:
        value = attrs.get(key)
        if isinstance(value, str) and "current_agent_name=" in value:
            names = _WORKFLOW_AGENT.findall(value)
            if names:
                return names[-1]
    return None


def _langgraph(cols: dict[str, list[Any]], metadata: Any, span_name: str, operation: str | None) -> str | None:
    """The operation a LangGraph span keeps, read with the run metadata OpenInference sends as ``metadata`` (a
    JSON object); the agent a graph's own span names.

    OpenInference makes any span whose name contains "agent" an AGENT span, so ``create_react_agent``'s node
    "agent" is one, once per model call, while a graph named ``forecaster`` is a CHAIN: the node was taken for
    the run (agent "agent", the status of its first model call: a tool's exception after it left the run ok).
    A node's own span (``langgraph_node`` is its name) is a step of the graph. The graph's invocation (LangGraph
    adds ``ls_integration``; only the spans inside a node carry ``langgraph_node``) names the agent with the
    graph's name (``create_agent(name=...)``, ``create_react_agent(name=...)``), unless that is the default
    "LangGraph"."""
    if operation not in _GRAPH_OPERATIONS or not isinstance(metadata, str) or '"ls_integration"' not in metadata:
        return operation
    try:
        meta = json.loads(metadata)
    except ValueError:
        return operation
    if not isinstance(meta, dict):
        return operation
    node = meta.get("langgraph_node")
    if operation == "invoke_agent" and node is not None and node == span_name:
        operation = cols["operation"][-1] = "invoke_workflow"
    elif (node is None and cols["agent_name"][-1] is None and meta.get("ls_integration") in _LANGGRAPH_INTEGRATIONS
          and span_name and span_name != _LANGGRAPH_DEFAULT_NAME):
        cols["agent_name"][-1] = span_name
    return operation


def _invocation_model(attrs: dict[str, Any]) -> str | None:
    """OpenInference error spans carry the model only in ``llm.invocation_parameters`` (a JSON object)."""
    params = attrs.get("llm.invocation_parameters")
    if not isinstance(params, str) or '"model"' not in params:
        return None
    try:
        model = json.loads(params).get("model")
    except (ValueError, AttributeError):
        return None
    return model if isinstance(model, str) and model else None


def _exception_type(events: list[dict[str, Any]]) -> str | None:
    for event in events:
        if event["name"] == "exception":
            kind = event["attributes"].get("exception.type")
            if isinstance(kind, str) and kind:
                return kind
    return None


def _unquote(value: str) -> str:
    """Some exporters send a session id JSON-encoded (``"\\"abc\\""``): store the id itself."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            inner = json.loads(value)
        except ValueError:
            return value
        if isinstance(inner, str):
            return inner
    return value


def _first_text(attrs: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value if isinstance(value, str) else str(value)
    return None


def _first_int(attrs: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = attrs.get(key)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value if 0 <= value < 2**63 else None
        if isinstance(value, float) and value.is_integer() and 0 <= value < 2**63:
            return int(value)
        if isinstance(value, str) and value.isdigit():
            number = int(value)
            return number if number < 2**63 else None
        return None
    return None


def _first_float(attrs: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = attrs.get(key)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return None
        else:
            return None
        return number if number == number and abs(number) != float("inf") else None
    return None
