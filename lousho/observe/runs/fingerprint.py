"""A span's fingerprint of what the agent sent: its system instructions, its tool definitions and its model.

A run with no ``lousho.harness.revision`` and no ``gen_ai.agent.version`` takes its revision from this
(``auto:<hash>``, runs_view.py), so a change to the agent's prompt or tools is a new revision without tagging.
Read in every convention we know: GenAI ``gen_ai.system_instructions``, ``gen_ai.input.messages`` (attribute
or details event) with role system and ``gen_ai.tool.definitions``; OpenInference ``llm.input_messages.N``
and ``llm.tools.N.tool.json_schema``; Traceloop ``gen_ai.prompt.N`` and ``llm.request.functions.N``; the
Vercel AI SDK's ``ai.prompt`` (its ``system`` part), ``ai.prompt.messages`` and ``ai.prompt.tools``. A span
with neither instructions nor tools has no fingerprint: its model alone says too little about the agent.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Keys whose presence may give a span a fingerprint (beyond the message keys conventions.py watches already).
KEYS = ("gen_ai.system_instructions", "gen_ai.tool.definitions", "llm.tools.0.tool.json_schema",
        "llm.request.functions.0.name", "ai.prompt", "ai.prompt.messages", "ai.prompt.tools")
_MESSAGE_KEYS = ("gen_ai.input.messages", "ai.prompt.messages")
_FLAT = ("llm.input_messages.{}.message.", "gen_ai.prompt.{}.")
_SYSTEM_ROLES = frozenset({"system", "developer"})


def fingerprint(attrs: dict[str, Any], details: dict[str, Any] | None, model: str | None) -> str | None:
    """16 hex characters over the span's system instructions, tool definitions and model; None without
    instructions or tools."""
    system = _system(attrs, details)
    tools = _tools(attrs, details)
    if not system and not tools:
        return None
    doc = json.dumps({"system": system, "tools": tools, "model": model}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(doc.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _system(attrs: dict[str, Any], details: dict[str, Any] | None) -> list[str]:
    texts: list[str] = []
    for source in (details or {}, attrs):
        instructions = _parse(source.get("gen_ai.system_instructions"))
        if instructions is not None:
            text = _content(instructions)
            if text:
                texts.append(text)
        for key in _MESSAGE_KEYS:
            texts += _system_messages(_parse(source.get(key)))
    prompt = _parse(attrs.get("ai.prompt"))
    if isinstance(prompt, dict):
        if isinstance(prompt.get("system"), str) and prompt["system"].strip():
            texts.append(prompt["system"].strip())
        texts += _system_messages(prompt.get("messages"))
    for pattern in _FLAT:
        index = 0
        while (role := attrs.get(pattern.format(index) + "role")) is not None or \
                attrs.get(pattern.format(index) + "content") is not None:
            if role in _SYSTEM_ROLES:
                text = _content(attrs.get(pattern.format(index) + "content"))
                if text:
                    texts.append(text)
            index += 1
    # The same instructions sent two ways (an attribute and the details event) count once, in order.
    return list(dict.fromkeys(texts))


def _system_messages(messages: Any) -> list[str]:
    if not isinstance(messages, list):
        return []
    out = []
    for message in messages:
        if isinstance(message, dict) and message.get("role") in _SYSTEM_ROLES:
            text = _content(message.get("content", message.get("parts")))
            if text:
                out.append(text)
    return out


def _content(value: Any) -> str | None:
    """The text of a string or a list of parts (``{"type": "text", "content"|"text": ...}``)."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list):
        parts = [p if isinstance(p, str) else p.get("content", p.get("text")) if isinstance(p, dict) else None
                 for p in value]
        joined = "\n".join(p for p in parts if isinstance(p, str) and p).strip()
        return joined or None
    return None


def _tools(attrs: dict[str, Any], details: dict[str, Any] | None) -> list[Any]:
    for source in (details or {}, attrs):
        tools = _parse(source.get("gen_ai.tool.definitions"))
        if isinstance(tools, list) and tools:
            return tools
    tools = _parse(attrs.get("ai.prompt.tools"))
    if isinstance(tools, list | tuple) and tools:
        return [_parse(t) for t in tools]
    flat = _indexed(attrs, "llm.tools.{}.tool.json_schema")
    if flat:
        return [_parse(t) for t in flat]
    functions = []
    index = 0
    while (name := attrs.get(f"llm.request.functions.{index}.name")) is not None:
        functions.append({"name": name, "description": attrs.get(f"llm.request.functions.{index}.description"),
                          "parameters": _parse(attrs.get(f"llm.request.functions.{index}.parameters"))})
        index += 1
    return functions


def _indexed(attrs: dict[str, Any], pattern: str) -> list[Any]:
    out = []
    while (value := attrs.get(pattern.format(len(out)))) is not None:
        out.append(value)
    return out


def _parse(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
