"""Promote well-known attributes to columns, mapping the aliases other instrumentations use.

The GenAI semantic conventions are the canonical names; OpenInference, Traceloop, Langfuse and
older GenAI releases name the same things differently (reference: GenAI conventions §4.4). A key we
do not know is never a reason to drop a span: it stays in the raw ``attributes`` JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any

# BIGINT, the type of the integer columns: a value outside it is stored as NULL (the raw attribute keeps it).
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# First key present wins, in this order.
ALIASES: dict[str, tuple[str, ...]] = {
    # ai.*: the Vercel AI SDK's own keys (its telemetry function id names the agent).
    "agent_name": ("gen_ai.agent.name", "agent.name", "lousho.agent.name", "ai.telemetry.functionId"),
    "provider": ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system", "ai.model.provider"),
    "request_model": ("gen_ai.request.model", "llm.model_name", "ai.model.id"),
    "response_model": ("gen_ai.response.model", "ai.response.model"),
    "tool_name": ("gen_ai.tool.name", "tool.name", "ai.toolCall.name"),
    "conversation_id": (
        "gen_ai.conversation.id",
        "session.id",
        "langfuse.session.id",
        "thread_id",
    ),
    "input_tokens": (
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.prompt_tokens",
        "llm.token_count.prompt",
    ),
    "output_tokens": (
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
        "llm.token_count.completion",
    ),
    "cost_usd": ("lousho.cost.usd", "gen_ai.usage.cost", "llm.cost.total"),
    "error_type": ("error.type", "exception.type"),
    "run_id": ("lousho.run.id",),
    "run_kind": ("lousho.run.kind",),
    "healed_from": ("lousho.run.healed_from",),
    "harness_revision": ("lousho.harness.revision",),
    "case_id": ("lousho.case.id",),
    "traffic_arm": ("lousho.traffic.arm",),
    "input": (
        "gen_ai.input.messages",
        "input.value",
        "traceloop.entity.input",
        "langfuse.observation.input",
    ),
    "output": (
        "gen_ai.output.messages",
        "output.value",
        "traceloop.entity.output",
        "langfuse.observation.output",
    ),
}

# Span-kind vocabularies of other instrumentations, mapped to gen_ai.operation.name values.
_OPENINFERENCE_KIND = {
    "LLM": "chat",
    "TOOL": "execute_tool",
    "AGENT": "invoke_agent",
    "CHAIN": "invoke_workflow",
    "RETRIEVER": "retrieval",
    "EMBEDDING": "embeddings",
}
_LANGFUSE_TYPE = {
    "generation": "chat",
    "tool": "execute_tool",
    "agent": "invoke_agent",
    "chain": "invoke_workflow",
    "retriever": "retrieval",
    "embedding": "embeddings",
}
_TRACELOOP_KIND = {"workflow": "invoke_workflow", "agent": "invoke_agent", "tool": "execute_tool"}
# The Vercel AI SDK's ai.operationId: a generate/stream call is the agent loop, its do* spans the requests to
# the model, ai.toolCall a tool's execution.
_AI_SDK_OPERATION = {
    "ai.generateText": "invoke_agent",
    "ai.streamText": "invoke_agent",
    "ai.generateObject": "invoke_agent",
    "ai.streamObject": "invoke_agent",
    "ai.generateText.doGenerate": "chat",
    "ai.streamText.doStream": "chat",
    "ai.generateObject.doGenerate": "chat",
    "ai.streamObject.doStream": "chat",
    "ai.toolCall": "execute_tool",
    "ai.embed.doEmbed": "embeddings",
    "ai.embedMany.doEmbed": "embeddings",
}
NAME_PREFIXES = (
    "chat",
    "text_completion",
    "generate_content",
    "embeddings",
    "execute_tool",
    "invoke_agent",
    "invoke_workflow",
    "create_agent",
    "retrieval",
)

# Every attribute key ``operation`` reads (the native decoder hands a span here only when it has one).
OPERATION_KEYS = ("gen_ai.operation.name", "openinference.span.kind", "langfuse.observation.type",
                  "traceloop.span.kind", "ai.operationId")

INT_COLUMNS = frozenset({"input_tokens", "output_tokens"})
FLOAT_COLUMNS = frozenset({"cost_usd"})
JSONISH_COLUMNS = frozenset({"input", "output"})


def operation(attrs: dict[str, Any], span_name: str) -> str | None:
    """The GenAI operation of a span, from its attributes, aliases, or its conventional name."""
    op = attrs.get("gen_ai.operation.name")
    if isinstance(op, str) and op:
        return op
    kind = attrs.get("openinference.span.kind")
    if isinstance(kind, str) and kind.upper() in _OPENINFERENCE_KIND:
        return _OPENINFERENCE_KIND[kind.upper()]
    kind = attrs.get("langfuse.observation.type")
    if isinstance(kind, str) and kind.lower() in _LANGFUSE_TYPE:
        return _LANGFUSE_TYPE[kind.lower()]
    kind = attrs.get("traceloop.span.kind")
    if isinstance(kind, str) and kind.lower() in _TRACELOOP_KIND:
        return _TRACELOOP_KIND[kind.lower()]
    kind = attrs.get("ai.operationId")
    if isinstance(kind, str) and kind in _AI_SDK_OPERATION:
        return _AI_SDK_OPERATION[kind]
    head = span_name.split(" ", 1)[0]
    if head in NAME_PREFIXES:
        return head
    return None


def promote(attrs: dict[str, Any], column: str) -> Any:
    """The value of a promoted column, coerced to the column's type; None when absent or unusable."""
    return promote_checked(attrs, column)[0]


def promote_checked(attrs: dict[str, Any], column: str) -> tuple[Any, bool]:
    """``(value, nulled)``: the promoted value, and whether an attribute was present but could not be
    represented in the column (out of range, not finite, not a number), so the column is NULL while
    the raw ``attributes`` JSON keeps the original. Never raises on data."""
    for key in ALIASES[column]:
        value = attrs.get(key)
        if value is None:
            continue
        if column in INT_COLUMNS:
            number = as_int(value)
            return number, number is None
        if column in FLOAT_COLUMNS:
            real = as_float(value)
            return real, real is None
        if column in JSONISH_COLUMNS:
            return (value if isinstance(value, str) else _json(value)), False
        return (value if isinstance(value, str) else str(value)), False
    return None, False


def as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
    if isinstance(value, int | float):
        return bool(value)
    return None


def as_int(value: Any) -> int | None:
    """An integer that fits BIGINT, or None: a float such as 1e30 or a 20-digit string would
    overflow the column and, before this check, failed the whole batch's Arrow build."""
    if isinstance(value, bool):
        return None
    number: int | None = None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value)
        except ValueError:
            return None
    if number is None or not INT64_MIN <= number <= INT64_MAX:
        return None
    return number


def as_float(value: Any) -> float | None:
    """A finite float, or None: NaN and infinities (``"1e400"``) would poison sums and averages."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, int | float | str):
            real = float(value)
        else:
            return None
    except (ValueError, OverflowError):
        return None
    return real if math.isfinite(real) else None


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
