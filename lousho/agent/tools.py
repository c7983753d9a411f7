"""Tools: plain Python functions, declared with ``@tool``, described to the model by their signature."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               list: "array", dict: "object"}


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the call. ``call_id`` is the idempotency key: a tool that was
    mid-flight when its process died runs again on resume with the same ``call_id``."""

    call_id: str
    run_id: str
    agent_dir: Path


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    fn: Callable[..., Any]
    parameters: dict[str, Any]
    needs_approval: bool = False
    wants_context: bool = False
    read_only: bool = False

    def schema(self) -> dict[str, Any]:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def call(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        if self.wants_context:
            return self.fn(**arguments, ctx=ctx)
        return self.fn(**arguments)


@dataclass
class ToolSet:
    tools: dict[str, Tool] = field(default_factory=dict)

    def add(self, t: Tool) -> None:
        self.tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def schemas(self) -> list[dict[str, Any]]:
        return [self.tools[name].schema() for name in sorted(self.tools)]


def tool(description: str, *, needs_approval: bool = False, name: str | None = None) -> Callable[[Callable], Callable]:
    """Mark a function as a tool. Its parameters (str, int, float, bool, list, dict; those without a
    default are required) become the JSON schema the model sees. A keyword ``ctx`` parameter gets a
    ``ToolContext``."""

    def mark(fn: Callable) -> Callable:
        fn.__lousho_tool__ = make_tool(fn, description, needs_approval=needs_approval, name=name)  # type: ignore[attr-defined]
        return fn

    return mark


def make_tool(fn: Callable, description: str, *, needs_approval: bool = False, name: str | None = None,
              read_only: bool = False) -> Tool:
    hints = get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    wants_context = False
    for param in inspect.signature(fn).parameters.values():
        if param.name == "ctx":
            wants_context = True
            continue
        properties[param.name] = {"type": _JSON_TYPES.get(hints.get(param.name, str), "string")}
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    parameters = {"type": "object", "properties": properties, "required": required}
    return Tool(name or fn.__name__, description, fn, parameters, needs_approval, wants_context, read_only)


def result_text(value: Any) -> str:
    """What the model sees of a tool's result."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
