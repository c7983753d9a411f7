"""Chat completions on the scripted server (``POST /v1/chat/completions``): what is served, the completion.

The request is what the script sees (``request.messages`` are its messages). Shapes the server cannot
answer faithfully are refused with a coded 400 instead of an answer the client would misread: several
choices (``n``), audio out, and content parts a script cannot read (images, audio, files).
"""

from __future__ import annotations

import time
from typing import Any

from lousho.models.errors import RequestRefused
from lousho.models.script import Answer, canonical, request_key

TEXT_PARTS = ("text", "input_text", "output_text", "refusal")


def check_chat(body: Any) -> dict[str, Any]:
    """``body`` if it is a chat request the server answers. Raises ValueError (malformed) or RequestRefused."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not all(
            isinstance(m, dict) for m in body["messages"]):
        raise ValueError("expected a JSON object with a list of message objects in \"messages\"")
    if not isinstance(body.get("stream", False), bool | None):
        raise ValueError("\"stream\" must be true or false")
    if body.get("n") not in (None, 1):
        raise RequestRefused(f"n={body['n']!r}: the scripted model server gives one choice per request", "n",
                             hint="leave \"n\" out (or send 1) and send one request per answer wanted")
    if body.get("audio") is not None or "audio" in (body.get("modalities") or ()):
        raise RequestRefused("audio output is not scripted", "modalities",
                             hint="ask for text: leave \"audio\" out and \"modalities\" at [\"text\"]")
    for i, message in enumerate(body["messages"]):
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestRefused(f"messages[{i}].content[{j}] is a part of type {kind!r}; a script reads "
                                     f"text only", f"messages[{i}].content", hint="send text content parts")
    return body


def usage_of(answer: Answer, body: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens: the script's own, or a simple, stable count of a token per 4 characters of
    the prompt (messages and tools) and of the reply."""
    if answer.usage is not None:
        return answer.usage
    prompt = _tokens(canonical(body["messages"]) + canonical(body.get("tools") or []))
    return prompt, _tokens((answer.content or "") + canonical(answer.tool_calls if answer.tool_calls else ""))


def message_of(answer: Answer) -> dict[str, Any]:
    """The assistant message of ``answer``, in the chat form (also what the request log shows as the reply)."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.tool_calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for c in answer.tool_calls]
    return message


def completion(answer: Answer, body: dict[str, Any], count: int) -> dict[str, Any]:
    """An OpenAI chat completion for ``answer``, with a deterministic id and token count."""
    prompt, output = usage_of(answer, body)
    return {
        "id": f"chatcmpl-{request_key(body)[:24]}-{count}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or "scripted",
        "choices": [{"index": 0, "message": message_of(answer), "finish_reason": answer.finish_reason,
                     "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output,
                  "prompt_tokens_details": {"cached_tokens": min(answer.cache_read, prompt)}},
    }


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)
