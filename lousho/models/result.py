"""What a model call returns: :class:`ChatResult`, its tool calls and token usage.

A durable run records a ``ChatResult`` as a step output and replays it on resume, so
``ChatResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r`` holds for every result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asked for.

    ``arguments`` is the parsed JSON object. When the model sent arguments that are not a JSON
    object, ``arguments_valid`` is False, ``arguments`` is empty, and ``raw_arguments`` keeps the
    text, so the agent can answer the model with the parse error instead of crashing.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str = "{}"
    arguments_valid: bool = True

    @classmethod
    def parse(cls, id: str, name: str, raw_arguments: str | Mapping[str, Any] | None) -> ToolCall:
        # Some servers send the object itself rather than the JSON string the OpenAI shape asks for.
        if isinstance(raw_arguments, Mapping):
            return cls(id, name, dict(raw_arguments), json.dumps(raw_arguments, sort_keys=True), True)
        raw = raw_arguments or ""
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return cls(id, name, {}, raw, False)
        if not isinstance(parsed, dict):
            return cls(id, name, {}, raw, False)
        return cls(id, name, parsed, raw, True)

    def to_openai(self) -> dict[str, Any]:
        """The call as it goes back into the transcript (an assistant message's ``tool_calls`` item)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.raw_arguments}}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments, "raw_arguments": self.raw_arguments,
                "arguments_valid": self.arguments_valid}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(str(data["id"]), str(data["name"]), dict(data.get("arguments") or {}),
                   str(data.get("raw_arguments", "{}")), bool(data.get("arguments_valid", True)))


@dataclass(frozen=True)
class Usage:
    """Tokens of one call. Zero when the provider did not report usage (``raw`` shows which).

    ``cache_read_tokens`` are the input tokens served from the provider's prompt cache (OpenAI's
    ``prompt_tokens_details.cached_tokens``): part of ``input_tokens``, priced lower by most providers.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class ChatResult:
    """One chat completion: the first choice's message, why it stopped, usage, and the raw JSON."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the transcript before the tool results."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return message

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "finish_reason": self.finish_reason,
            "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens,
                      "cache_read_tokens": self.usage.cache_read_tokens},
            "model": self.model,
            "raw": self.raw,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatResult:
        usage = data.get("usage") or {}
        return cls(
            content=data.get("content"),
            tool_calls=[ToolCall.from_dict(call) for call in data.get("tool_calls") or []],
            finish_reason=data.get("finish_reason"),
            # A result recorded before cache reads were kept has none: 0.
            usage=Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)),
                        int(usage.get("cache_read_tokens", 0))),
            model=data.get("model"),
            raw=dict(data.get("raw") or {}),
        )

    @classmethod
    def from_response(cls, doc: Any) -> ChatResult:
        """Parse an OpenAI chat completion. Raises ValueError when ``doc`` is not one."""
        if not isinstance(doc, dict):
            raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
        choices = doc.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ValueError("no choices")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise ValueError("the first choice has no message")
        calls = []
        for i, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not function.get("name"):
                raise ValueError(f"tool call {i} has no function name")
            calls.append(ToolCall.parse(str(call.get("id") or f"call_{i}"), str(function["name"]),
                                        function.get("arguments")))
        usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
        return cls(
            content=content_text(message.get("content")),
            tool_calls=calls,
            finish_reason=choices[0].get("finish_reason"),
            usage=_usage(usage),
            model=doc.get("model"),
            raw=doc,
        )


def content_text(content: Any) -> str | None:
    # Content is a string, null, or (some servers) a list of parts of which the text ones count.
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _usage(usage: Mapping[str, Any]) -> Usage:
    prompt = _int(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    # Cached tokens are part of the prompt's: more than the prompt is a server's error, kept within it.
    return Usage(prompt, _int(usage.get("completion_tokens")), min(cached, prompt))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
