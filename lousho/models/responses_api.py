"""The Responses API on the scripted server (``POST /v1/responses``), read as the chat view a script sees.

A script answers one shape of request, the chat one, whichever API the framework speaks: the request's
``instructions`` become a system message, a chained ``previous_response_id`` brings back that conversation,
input items become messages (``function_call`` an assistant tool call, ``function_call_output`` a tool
message). So ``request.turn``, ``.last_tool``, ``.count`` and the tool-call ids mean the same in both APIs,
and the answer goes back out as a Response object with output items and usage.
"""

from __future__ import annotations

import collections
import copy
import threading
from collections.abc import Callable
from typing import Any

from lousho.models.errors import PreviousResponseNotFound, RequestRefused
from lousho.models.script import Answer

ITEM_TYPES = ("message", "function_call", "function_call_output", "item_reference", "reasoning")
ROLES = ("user", "system", "developer", "assistant")
# The text parts of a message; any other part (an image, a file, audio) has nothing a script could read.
TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}
# Request fields the server does not serve: each would change the answer in a way a script cannot give.
REFUSED = {
    "background": "background responses are not scripted; leave \"background\" out",
    "conversation": "conversations are not kept; chain with previous_response_id or send the whole input",
    "prompt": "stored prompt templates are not scripted; send the instructions and input themselves",
}
# Read into the view; everything else is a parameter (logged, passed to the script in request.body).
READ = ("input", "instructions", "tools")


Lookup = Callable[[str, str], dict[str, Any]]  # (item id, where) -> a kept output item; raises if not kept


def chat_view(body: dict[str, Any], history: list[dict[str, Any]],
              lookup: Lookup) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The chat request a script sees for this Responses request, and the conversation to keep for a follow-up.

    ``history`` is the kept conversation of ``previous_response_id`` ([] without one); ``lookup`` resolves an
    ``item_reference`` input item to an output item this server gave. The instructions
    lead the view but are not kept: OpenAI does not carry them over to a chained response either.
    Raises ValueError for a malformed request, RequestRefused for a shape the server does not serve.
    """
    for name, hint in REFUSED.items():
        if body.get(name) not in (None, False):
            raise RequestRefused(f"\"{name}\" is not supported by the scripted model server", name, hint=hint)
    if not isinstance(body.get("stream", False), bool | None):
        raise ValueError("\"stream\" must be true or false")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ValueError("\"instructions\" must be a string")
    conversation = copy.deepcopy(history) + input_messages(body.get("input"), lookup)
    view = {key: value for key, value in body.items() if key not in READ}
    view["messages"] = ([{"role": "system", "content": instructions}] if instructions else []) + conversation
    if body.get("tools"):
        view["tools"] = [chat_tool(tool, i) for i, tool in enumerate(_list(body["tools"], "tools"))]
    return view, conversation


def input_messages(items: Any, lookup: Lookup) -> list[dict[str, Any]]:
    """Input items as chat messages. Consecutive assistant items (a message, then function calls) make one
    assistant message, as the same answer makes in the chat API. An ``item_reference`` (sent instead of an
    item by clients that rely on stored responses) reads as the item it names."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(_list(items, "input")):
        if not isinstance(item, dict):
            raise ValueError(f"input[{i}] must be an object")
        if item.get("type") == "item_reference":
            item = lookup(str(item.get("id")), f"input[{i}]")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            if item.get("role") not in ROLES:
                raise ValueError(f"input[{i}].role must be one of {', '.join(ROLES)}")
            messages.append({"role": item["role"], "content": _text(item.get("content"), f"input[{i}].content")})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise ValueError(f"input[{i}]: a function_call needs \"name\" and \"call_id\"")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": str(item.get("arguments") or "")}}
            if messages and messages[-1]["role"] == "assistant":
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise ValueError(f"input[{i}]: a function_call_output needs \"call_id\"")
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _text(item.get("output"), f"input[{i}].output")})
        elif kind != "reasoning":  # reasoning items carry nothing a script reads; this server never makes them
            raise RequestRefused(f"input[{i}] has type {kind!r}", f"input[{i}]",
                                 hint=f"send input items of type {', '.join(ITEM_TYPES)}")
    return messages


def chat_tool(tool: Any, i: int) -> dict[str, Any]:
    """A Responses function tool in the chat form (``{"type": "function", "function": {...}}``)."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        raise RequestRefused(f"tools[{i}] has type {kind!r}", f"tools[{i}]",
                             hint="give function tools; a hosted tool (web_search, file_search, ...) has no "
                                  "scripted answer")
    if not isinstance(tool.get("name"), str):
        raise ValueError(f"tools[{i}] needs a \"name\"")
    function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
    return {"type": "function", "function": function}


def _text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for j, part in enumerate(_list(content, where)):
        key = TEXT_PARTS.get(part.get("type")) if isinstance(part, dict) else None
        if key is None:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise RequestRefused(f"{where}[{j}] is a part of type {kind!r}; a script reads text only",
                                 f"{where}[{j}]", hint="send text parts (input_text, output_text)")
        parts.append(str(part.get(key) or ""))
    return "".join(parts)


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"\"{where}\" must be a list")
    return value


def response_object(answer: Answer, body: dict[str, Any], rid: str, created: int,
                    usage: tuple[int, int]) -> dict[str, Any]:
    """The Response for ``answer``: a message item for its text, a function_call item per tool call.

    A script's ``finish_reason: "length"`` makes an incomplete response, as a capped output does.
    """
    output: list[dict[str, Any]] = []
    if answer.content or not answer.tool_calls:
        output.append({"type": "message", "id": f"msg_{rid[5:]}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": answer.content or "", "annotations": [],
                                    "logprobs": []}]})
    for n, call in enumerate(answer.tool_calls, 1):
        output.append({"type": "function_call", "id": f"fc_{rid[5:]}_{n}", "call_id": call["id"],
                       "name": call["name"], "arguments": call["arguments"], "status": "completed"})
    incomplete = answer.finish_reason == "length"
    prompt, completion = usage
    return {
        "id": rid, "object": "response", "created_at": created, "status": "incomplete" if incomplete else "completed",
        "background": False, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model") or "scripted", "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"), "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True), "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}}, "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [], "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation") or "disabled", "user": body.get("user"),
        "metadata": body.get("metadata") or {},
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": min(answer.cache_read, prompt)},
                  "output_tokens": completion,
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + completion},
    }


class ResponseMemory:
    """Recent stored responses, by id: their conversation for ``previous_response_id``, their output items for
    ``item_reference``. Thread-safe. Bounded (oldest forgotten first), so a long benchmark does not grow the
    server without end.
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._kept: collections.OrderedDict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = (
            collections.OrderedDict())
        self._items: dict[str, str] = {}  # output item id -> the response that gave it
        self._lock = threading.Lock()

    def history(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The conversation ``body`` chains from: [] without ``previous_response_id``."""
        rid = body.get("previous_response_id")
        if rid is None:
            return []
        with self._lock:
            kept = self._kept.get(rid) if isinstance(rid, str) else None
        if kept is None:
            raise PreviousResponseNotFound(f"no response with id {rid!r} is kept", "previous_response_id")
        return kept[0]

    def item(self, item_id: str, where: str) -> dict[str, Any]:
        """The output item ``item_id`` of a kept response (an ``item_reference``)."""
        with self._lock:
            rid = self._items.get(item_id)
            output = self._kept[rid][1] if rid is not None else []
        for item in output:
            if item["id"] == item_id:
                return item
        raise PreviousResponseNotFound(f"{where}: no output item with id {item_id!r} is kept", where)

    def keep(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        with self._lock:
            self._kept[response["id"]] = (conversation, response["output"])
            self._items.update((item["id"], response["id"]) for item in response["output"])
            while len(self._kept) > self.size:
                _, (_, output) = self._kept.popitem(last=False)
                for item in output:
                    self._items.pop(item["id"], None)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._items.clear()
