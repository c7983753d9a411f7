"""Scripts for the scripted model server: what a script sees, how it is loaded, what it may answer.

A script is a Python file defining ``respond(request) -> reply``, or a JSON file holding a list of
rules ``{"when": {...}, "reply": ...}`` (first match wins; a rule without ``when`` always matches).
A reply is a string (assistant text), a dict ``{"tool_calls": [{"name", "arguments"}], "content"?}``,
a :class:`~lousho.models.faults.Fault`, or ``{"fault": ...}`` (a fault's JSON form).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.models.errors import NoRuleMatched, ScriptError, ScriptNoRespond, ScriptNotFound
from lousho.models.faults import Fault
from lousho.models.result import content_text


@dataclass(frozen=True)
class ToolResult:
    """A ``role: tool`` message; ``name`` comes from the assistant call it answers (None if not found)."""

    name: str | None
    id: str | None
    content: str


@dataclass(frozen=True)
class ScriptRequest:
    """One chat request, as a script sees it.

    ``rng`` is seeded from (server seed, messages): the same messages get the same draws on any
    server with the same seed, however often they are sent. ``count`` is how many times this exact
    request (model, messages, tools) has arrived, this one included: 1 the first time, 2 on a retry.
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    system: str
    last_user: str | None
    last_tool: ToolResult | None
    # Every tool message after the last assistant message (parallel calls answer in a run).
    tool_results: list[ToolResult]
    turn: int
    rng: random.Random
    count: int
    body: dict[str, Any]

    @property
    def tool_names(self) -> list[str]:
        return [str(t.get("function", {}).get("name")) for t in self.tools]


@dataclass(frozen=True)
class Answer:
    """A normalised successful reply: what goes into the completion's message."""

    content: str | None
    tool_calls: list[dict[str, str]]  # {"id", "name", "arguments": the JSON text}
    finish_reason: str
    usage: tuple[int, int] | None = None  # (input, output) when the script sets it
    cache_read: int = 0  # of the input, read from the prompt cache (the script's usage "cache_read_tokens")

    def to_dict(self) -> dict[str, Any]:
        return {"content": self.content, "tool_calls": self.tool_calls, "finish_reason": self.finish_reason}


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(body: Mapping[str, Any]) -> str:
    """What makes two requests "the same" for ``count``: model, messages and tools."""
    return hashlib.sha256(canonical([body.get("model"), body.get("messages"), body.get("tools")]).encode()).hexdigest()


def rng_for(seed: int, messages: Any) -> random.Random:
    digest = hashlib.sha256(canonical([seed, messages]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def system_text(messages: list[dict[str, Any]]) -> str:
    """The system prompt: every system (or developer) message's text, in order."""
    texts = (content_text(m.get("content")) or "" for m in messages if m.get("role") in ("system", "developer"))
    return "\n\n".join(texts)


def build_request(body: dict[str, Any], seed: int, count: int) -> ScriptRequest:
    messages: list[dict[str, Any]] = body["messages"]
    names = {call.get("id"): call.get("function", {}).get("name")
             for m in messages if m.get("role") == "assistant" for call in m.get("tool_calls") or []}
    trailing: list[ToolResult] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        call_id = message.get("tool_call_id")
        trailing.insert(0, ToolResult(message.get("name") or names.get(call_id), call_id,
                                      content_text(message.get("content")) or ""))
    users = [m for m in messages if m.get("role") == "user"]
    return ScriptRequest(
        model=str(body.get("model", "")),
        messages=messages,
        tools=list(body.get("tools") or []),
        system=system_text(messages),
        last_user=content_text(users[-1].get("content")) if users else None,
        last_tool=trailing[-1] if trailing else None,
        tool_results=trailing,
        turn=sum(1 for m in messages if m.get("role") == "assistant"),
        rng=rng_for(seed, messages),
        count=count,
        body=body,
    )


def normalise(reply: Any, request: ScriptRequest) -> Answer | Fault:
    """Check a script's reply and give tool calls their ids. Raises TypeError/ValueError when malformed.

    Ids are ``call_<n>``, numbered after the tool calls already in the transcript, so they are the
    same for the same request and never repeat within a conversation.
    """
    if isinstance(reply, Fault):
        return reply
    if isinstance(reply, str):
        return Answer(reply, [], "stop")
    if not isinstance(reply, Mapping):
        raise TypeError(f"respond() returned {type(reply).__name__}; expected str, dict or Fault")
    if "fault" in reply:
        return Fault.from_dict(reply)
    unknown = set(reply) - {"content", "tool_calls", "finish_reason", "usage"}
    if unknown:
        raise ValueError(f"unknown reply keys {sorted(unknown)}; expected content, tool_calls, finish_reason, usage")
    content = reply.get("content")
    if content is not None and not isinstance(content, str):
        raise TypeError("reply content must be a string")
    start = sum(len(m.get("tool_calls") or []) for m in request.messages if m.get("role") == "assistant")
    calls = []
    for i, call in enumerate(reply.get("tool_calls") or []):
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ValueError(f"tool call {i} needs a \"name\"")
        arguments = call.get("arguments", {})
        # A string is sent as is: that is how a script makes the model send arguments that are not JSON.
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append({"id": str(call.get("id") or f"call_{start + i + 1}"), "name": call["name"], "arguments": raw})
    usage = reply.get("usage")
    return Answer(content, calls, str(reply.get("finish_reason") or ("tool_calls" if calls else "stop")),
                  None if usage is None else (int(usage["input_tokens"]), int(usage["output_tokens"])),
                  0 if usage is None else int(usage.get("cache_read_tokens", 0)))


@dataclass(frozen=True)
class Script:
    respond: Callable[[ScriptRequest], Any]
    source: str  # the file, or the callable's name: errors and the log name it


def load_script(script: str | Path | Callable[[ScriptRequest], Any]) -> Script:
    """A callable, a ``.py`` file defining ``respond``, or a ``.json`` rule list. Raises ScriptError."""
    if callable(script):
        return Script(script, getattr(script, "__qualname__", repr(script)))
    path = Path(script)
    if not path.is_file():
        raise ScriptNotFound(path, "no such file")
    if path.suffix == ".json":
        return Script(JsonRules.load(path), str(path))
    if path.suffix != ".py":
        raise ScriptError(path, f"unknown script type {path.suffix or '(none)'!r}: expected .py or .json")
    return Script(_load_python(path), str(path))


def _load_python(path: Path) -> Callable[[ScriptRequest], Any]:
    # A module name per file, registered while it runs: dataclasses in a script look themselves up there.
    name = "lousho_script_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ScriptError(path, "cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the script's own bug, reported with its file; not ours to re-raise
        sys.modules.pop(name, None)
        raise ScriptError(path, f"importing it raised {type(e).__name__}: {e}") from e
    respond = getattr(module, "respond", None)
    if not callable(respond):
        raise ScriptNoRespond(path, "defines no function respond(request)")
    return respond


_CONDITIONS = {"last_user_contains", "system_contains", "last_tool_contains", "turn", "model"}


@dataclass(frozen=True)
class JsonRule:
    when: dict[str, Any]
    replies: list[Any]  # indexed by request.count; the last repeats

    def matches(self, request: ScriptRequest) -> bool:
        tests = {
            "last_user_contains": lambda v: v in (request.last_user or ""),
            "system_contains": lambda v: v in request.system,
            "last_tool_contains": lambda v: request.last_tool is not None and v in request.last_tool.content,
            "turn": lambda v: request.turn == v,
            "model": lambda v: request.model == v,
        }
        return all(tests[key](value) for key, value in self.when.items())


@dataclass(frozen=True)
class JsonRules:
    """A JSON script: ``[{"when": {...}, "reply": R}, {"when": {...}, "replies": [R1, R2]}, {"reply": R}]``.

    ``when`` keys (all must hold): last_user_contains, system_contains, last_tool_contains, turn,
    model. ``replies`` gives the n-th reply to the n-th identical request (the last one repeats),
    e.g. a fault first and an answer on the retry.
    """

    path: str
    rules: list[JsonRule]

    @classmethod
    def load(cls, path: Path) -> JsonRules:
        try:
            doc = json.loads(path.read_text())
        except ValueError as e:
            raise ScriptError(path, f"not valid JSON: {e}") from None
        if not isinstance(doc, list):
            raise ScriptError(path, "expected a JSON list of rules")
        return cls(str(path), [cls._rule(path, i, item) for i, item in enumerate(doc)])

    @staticmethod
    def _rule(path: Path, i: int, item: Any) -> JsonRule:
        if not isinstance(item, dict) or ("reply" in item) == ("replies" in item):
            raise ScriptError(path, f"rule {i}: expected an object with \"reply\" or \"replies\"")
        when = item.get("when") or {}
        if not isinstance(when, dict):
            raise ScriptError(path, f"rule {i}: \"when\" must be an object")
        unknown = (set(when) - _CONDITIONS) | (set(item) - {"when", "reply", "replies"})
        if unknown:
            raise ScriptError(path, f"rule {i}: unknown keys {sorted(unknown)}; a rule has when and reply "
                                    f"(or replies), and \"when\" takes {', '.join(sorted(_CONDITIONS))}")
        replies = [item["reply"]] if "reply" in item else item["replies"]
        if not isinstance(replies, list) or not replies:
            raise ScriptError(path, f"rule {i}: \"replies\" must be a non-empty list")
        try:
            parsed = [Fault.from_dict(r) if isinstance(r, dict) and "fault" in r else r for r in replies]
        except ValueError as e:
            raise ScriptError(path, f"rule {i}: {e}") from None
        return JsonRule(dict(when), parsed)

    def __call__(self, request: ScriptRequest) -> Any:
        for rule in self.rules:
            if rule.matches(request):
                return rule.replies[min(request.count, len(rule.replies)) - 1]
        raise NoRuleMatched(self.path, f"no rule matched (last user message {request.last_user!r:.80})")
