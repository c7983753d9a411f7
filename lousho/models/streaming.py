"""Server-sent events for ``stream: true``: a finished answer sent as the stream a provider sends.

The script answers whole, so the stream is made from the very object the non-streamed request gets (the
chat completion, the Response): both modes agree by construction. Text goes out a word at a time and
tool-call arguments in short pieces, so a client's delta accumulation is exercised for real. A fault is
never streamed: it is answered before the stream starts, with its HTTP status, as providers do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

ARGUMENT_PIECE = 8  # characters of tool-call arguments per delta
_WORDS = re.compile(r"\s*\S+\s*|\s+")


def pieces(text: str, arguments: bool = False) -> list[str]:
    """``text`` cut into deltas: words (with their spaces), or fixed pieces of JSON arguments."""
    if arguments:
        return [text[i:i + ARGUMENT_PIECE] for i in range(0, len(text), ARGUMENT_PIECE)]
    return _WORDS.findall(text)


def chat_events(completion: dict[str, Any], include_usage: bool) -> Iterator[str]:
    """``chat.completion.chunk`` events, then ``[DONE]``.

    With ``stream_options.include_usage`` every chunk has ``usage: null`` and a last chunk with no
    choices carries the usage, as OpenAI sends it.
    """
    head = {key: completion[key] for key in ("id", "created", "model")}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        doc: dict[str, Any] = {**head, "object": "chat.completion.chunk", "system_fingerprint": None, "choices": [
            {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        if include_usage:
            doc["usage"] = None
        return _data(doc)

    # A tool-call-only answer has null content, in the stream as in the whole message.
    yield chunk({"role": "assistant", "content": None if message["content"] is None else ""})
    for piece in pieces(message["content"] or ""):
        yield chunk({"content": piece})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": function["name"], "arguments": ""}}]})
        for piece in pieces(function["arguments"], arguments=True):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield _data({**head, "object": "chat.completion.chunk", "system_fingerprint": None, "choices": [],
                     "usage": completion["usage"]})
    yield "data: [DONE]\n\n"


def response_events(response: dict[str, Any]) -> Iterator[str]:
    """The Responses event stream: created, in_progress, per output item its added / delta / done events,
    then completed (or incomplete). Each event has its ``type`` as the SSE event name and a ``sequence_number``."""
    sequence = iter(range(1 << 62))

    def event(kind: str, **fields: Any) -> str:
        doc = {"type": kind, "sequence_number": next(sequence), **fields}
        return f"event: {kind}\ndata: {json.dumps(doc, ensure_ascii=False)}\n\n"

    start = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    for index, item in enumerate(response["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "content": []})
            yield event("response.content_part.added", **where, content_index=0, part={**part, "text": ""})
            for piece in pieces(part["text"]):
                yield event("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])
            yield event("response.output_text.done", **where, content_index=0, text=part["text"], logprobs=[])
            yield event("response.content_part.done", **where, content_index=0, part=part)
        else:
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "arguments": ""})
            for piece in pieces(item["arguments"], arguments=True):
                yield event("response.function_call_arguments.delta", **where, delta=piece)
            yield event("response.function_call_arguments.done", **where, name=item["name"],
                        arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
    yield event(f"response.{response['status']}", response=response)


def _data(doc: dict[str, Any]) -> str:
    return f"data: {json.dumps(doc, ensure_ascii=False)}\n\n"
