"""The scripted server speaks what frameworks send by default, through the official openai SDK over HTTP:
the Responses API (tools, previous_response_id, input items), server-sent events for both APIs, the
script's faults in every mode, and a coded 400 (never a 404 or a silent answer) for what it does not serve."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from models_support import (  # noqa: F401 (fixtures, registered by import)
    server_fixture,
    shared_server_fixture,
)

from lousho.models.scripted import Fault, ScriptedModelServer

TOOLS = [{"type": "function", "name": name, "description": f"the {name} tool",
          "parameters": {"type": "object", "properties": {}}} for name in ("lookup_order", "refund")]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}} for tool in TOOLS]
CALLS = [("call_1", "lookup_order", '{"order_id": "A-1"}'), ("call_2", "refund", '{"amount": 5, "reason": "late"}')]


@pytest.fixture(name="sdk")
def sdk_fixture(server: ScriptedModelServer) -> Iterator[openai.OpenAI]:
    # One request per call, as the chat client makes: a fault must reach the test, not the SDK's retries. Closed
    # when the test ends: left to the collector, its pooled sockets could be finalized before the pool, and the
    # warning fail whichever later test the collector happened to run in.
    with openai.OpenAI(base_url=server.url, api_key="sk-test", max_retries=0, timeout=10) as sdk:
        yield sdk


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_responses_create_answers_with_the_script_instructions_first_and_usage(
    server: ScriptedModelServer, sdk: openai.OpenAI
) -> None:
    response = sdk.responses.create(model="scripted-1", instructions="Be brief.", input="hello")
    assert (response.output_text, response.status, response.model) == ("echo: hello", "completed", "scripted-1")
    assert response.usage is not None and response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    (entry,) = server.requests
    assert (entry["path"], entry["system"], entry["status"]) == ("/v1/responses", "Be brief.", 200)
    assert entry["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    assert entry["reply"] == {"role": "assistant", "content": "echo: hello"}


def test_responses_tool_calls_chain_by_previous_response_id_or_by_the_whole_input(
    server: ScriptedModelServer, sdk: openai.OpenAI
) -> None:
    first = sdk.responses.create(model="m", instructions="Help.", input="tools", tools=TOOLS)  # type: ignore[arg-type]
    assert [item.type for item in first.output] == ["message", "function_call", "function_call"]
    calls = [(c.call_id, c.name, c.arguments) for c in first.output if c.type == "function_call"]
    assert calls == CALLS
    outputs = [{"type": "function_call_output", "call_id": "call_1", "output": "shipped"},
               {"type": "function_call_output", "call_id": "call_2", "output": "refunded"}]
    chained = sdk.responses.create(model="m", instructions="Help.", previous_response_id=first.id,
                                   input=outputs, tools=TOOLS)  # type: ignore[arg-type]
    assert chained.output_text == "the refund tool said refunded"
    assert chained.previous_response_id == first.id
    # The same conversation sent whole, as frameworks that keep their own history do, reads the same.
    history = [{"role": "user", "content": "tools"}, *[item.model_dump(exclude_none=True) for item in first.output]]
    whole = sdk.responses.create(model="m", instructions="Help.", input=[*history, *outputs],  # type: ignore[list-item]
                                 tools=TOOLS)  # type: ignore[arg-type]
    assert whole.output_text == chained.output_text
    seen = server.requests
    assert seen[1]["messages"] == seen[2]["messages"]
    assert seen[1]["messages"][2] == {"role": "assistant", "content": "checking", "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in CALLS]}
    assert seen[1]["tools"] == CHAT_TOOLS
    assert seen[2]["count"] == 2  # the same request as far as the script can tell


def test_item_references_read_as_the_output_items_they_name(server: ScriptedModelServer, sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model="m", input="tools", tools=TOOLS)  # type: ignore[arg-type]
    outputs = [{"type": "function_call_output", "call_id": "call_1", "output": "shipped"}]
    history = [{"role": "user", "content": "tools"}, *[item.model_dump(exclude_none=True) for item in first.output]]
    references = [{"role": "user", "content": "tools"}, *[{"type": "item_reference", "id": i.id} for i in first.output]]
    for given in (history, references):
        answer = sdk.responses.create(model="m", input=[*given, *outputs], tools=TOOLS)  # type: ignore[arg-type]
        assert answer.output_text == "the lookup_order tool said shipped"
    assert server.requests[1]["messages"] == server.requests[2]["messages"]
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model="m", input=[{"type": "item_reference", "id": "msg_nothing"}])
    assert caught.value.code == "LOUSHO_MODELS_PREVIOUS_RESPONSE_NOT_FOUND"


def test_an_unknown_or_unstored_previous_response_is_a_coded_400(sdk: openai.OpenAI) -> None:
    unstored = sdk.responses.create(model="m", input="hello", store=False)
    for rid in ("resp_nothing", unstored.id):
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.responses.create(model="m", input="again", previous_response_id=rid)
        assert caught.value.code == "LOUSHO_MODELS_PREVIOUS_RESPONSE_NOT_FOUND"
        assert "hint:" in caught.value.message


def test_responses_stream_through_the_sdk_helper_gives_deltas_and_the_same_response(sdk: openai.OpenAI) -> None:
    whole = sdk.responses.create(model="m", input="tools", tools=TOOLS)  # type: ignore[arg-type]
    with sdk.responses.stream(model="m", input="tools", tools=TOOLS) as stream:  # type: ignore[arg-type]
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    for kind in ("response.output_item.added", "response.output_text.delta", "response.output_item.done",
                 "response.function_call_arguments.delta", "response.function_call_arguments.done"):
        assert kind in kinds
    assert kinds.count("response.function_call_arguments.delta") > 2  # arguments arrive in pieces
    assert _items(final.output) == _items(whole.output) == [("message", "checking"), *CALLS]
    assert final.usage == whole.usage


def _items(output: list[Any]) -> list[tuple[str, ...]]:
    return [(item.type, item.content[0].text) if item.type == "message" else (item.call_id, item.name, item.arguments)
            for item in output]


def test_responses_create_stream_true_sends_text_deltas_then_completed_with_usage(sdk: openai.OpenAI) -> None:
    events = list(sdk.responses.create(model="m", input="several words here", stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == 4 and "".join(deltas) == "echo: several words here"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "echo: several words here"
    assert completed.response.usage is not None and completed.response.usage.total_tokens > 0


def test_chat_stream_with_include_usage_sends_deltas_a_usage_chunk_and_done(
    server: ScriptedModelServer, sdk: openai.OpenAI
) -> None:
    chunks = list(sdk.chat.completions.create(model="m", messages=user("several words here"),  # type: ignore[arg-type]
                                              stream=True, stream_options={"include_usage": True}))
    text = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert text == ["echo: ", "several ", "words ", "here"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    whole = sdk.chat.completions.create(model="m", messages=user("several words here"))  # type: ignore[arg-type]
    assert chunks[-1].usage == whole.usage
    assert server.requests[0]["reply"] == server.requests[1]["reply"]  # the log shows the reply either way
    plain = list(sdk.chat.completions.create(model="m", messages=user("hi"), stream=True))  # type: ignore[arg-type]
    assert all(c.usage is None and c.choices for c in plain)  # no usage chunk unless asked


def test_chat_stream_tool_calls_accumulate_to_the_non_streamed_message(sdk: openai.OpenAI) -> None:
    raw = list(sdk.chat.completions.create(model="m", messages=user("tools"), tools=CHAT_TOOLS,  # type: ignore[arg-type]
                                           stream=True))
    pieces = [call for c in raw if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert len(pieces) > 4 and [p.id for p in pieces if p.id] == ["call_1", "call_2"]
    with sdk.chat.completions.stream(model="m", messages=user("tools"), tools=CHAT_TOOLS,  # type: ignore[arg-type]
                                     stream_options={"include_usage": True}) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert (message.content, final.choices[0].finish_reason) == ("checking", "tool_calls")
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []] == CALLS
    assert final.usage is not None and final.usage.total_tokens > 0


MODES: dict[str, Callable[[openai.OpenAI, str], str]] = {
    "chat-stream": lambda sdk, text: "".join(
        c.choices[0].delta.content or "" for c in sdk.chat.completions.create(
            model="m", messages=user(text), stream=True) if c.choices),  # type: ignore[arg-type]
    "responses": lambda sdk, text: sdk.responses.create(model="m", input=text).output_text,
    "responses-stream": lambda sdk, text: "".join(
        e.delta for e in sdk.responses.create(model="m", input=text, stream=True)
        if e.type == "response.output_text.delta"),
}


# The modes this file adds; plain chat's faults are tested in test_scripted_server.py.
@pytest.mark.parametrize("mode", MODES)
def test_the_scripts_faults_answer_in_every_mode_and_the_next_call_is_answered(
    server: ScriptedModelServer, sdk: openai.OpenAI, mode: str
) -> None:
    ask = MODES[mode]
    with pytest.raises(openai.InternalServerError):
        ask(sdk, "fault 500")  # a fault the script returns
    with pytest.raises(openai.InternalServerError) as raised:
        ask(sdk, "raise")  # the script's own bug
    assert raised.value.code == "LOUSHO_MODELS_SCRIPT_RAISED"
    server.inject(Fault.rate_limit(retry_after=3))
    with pytest.raises(openai.RateLimitError) as limited:
        ask(sdk, "hello")
    assert limited.value.response.headers["retry-after"] == "3"
    server.inject(Fault.hang(0.1))
    assert ask(sdk, "hello") == "echo: hello"  # after the hang, the script's answer
    assert [e["status"] for e in server.requests] == [500, 500, 429, 200]


def _raw(url: str, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(method, path, None if body is None else json.dumps(body), {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
UNSERVED: dict[str, tuple[Callable[[openai.OpenAI], Any], str]] = {
    "n=2": (lambda sdk: sdk.chat.completions.create(model="m", messages=user("hi"), n=2),  # type: ignore[arg-type]
            "LOUSHO_MODELS_UNSUPPORTED_REQUEST"),
    "audio out": (lambda sdk: sdk.chat.completions.create(
        model="m", messages=user("hi"), modalities=["text", "audio"],  # type: ignore[arg-type]
        audio={"voice": "alloy", "format": "wav"}), "LOUSHO_MODELS_UNSUPPORTED_REQUEST"),
    "an image part": (lambda sdk: sdk.chat.completions.create(model="m", messages=[  # type: ignore[misc]
        {"role": "user", "content": [{"type": "text", "text": "what is it?"}, IMAGE]}]),
        "LOUSHO_MODELS_UNSUPPORTED_REQUEST"),
    "a hosted tool": (lambda sdk: sdk.responses.create(model="m", input="hi", tools=[{"type": "web_search"}]),
                      "LOUSHO_MODELS_UNSUPPORTED_REQUEST"),
    "an input image": (lambda sdk: sdk.responses.create(model="m", input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}]}]),
        "LOUSHO_MODELS_UNSUPPORTED_REQUEST"),
    "background": (lambda sdk: sdk.responses.create(model="m", input="hi", background=True),
                   "LOUSHO_MODELS_UNSUPPORTED_REQUEST"),
    "embeddings": (lambda sdk: sdk.embeddings.create(model="m", input="hi"), "LOUSHO_MODELS_UNKNOWN_ENDPOINT"),
    "the model list": (lambda sdk: sdk.models.list(), "LOUSHO_MODELS_UNKNOWN_ENDPOINT"),
}


@pytest.mark.parametrize("shape", UNSERVED)
def test_a_shape_it_does_not_serve_is_a_coded_400_with_a_hint(
    server: ScriptedModelServer, sdk: openai.OpenAI, shape: str
) -> None:
    send, code = UNSERVED[shape]
    with pytest.raises(openai.BadRequestError) as caught:
        send(sdk)
    assert caught.value.code == code
    assert "hint:" in caught.value.message
    assert caught.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert server.requests[-1]["status"] == 400


def test_another_method_on_a_served_path_is_a_coded_400_naming_the_endpoints(server: ScriptedModelServer) -> None:
    status, body = _raw(server.url, "GET", "/v1/chat/completions")
    assert status == 400 and body["error"]["code"] == "LOUSHO_MODELS_UNKNOWN_ENDPOINT"
    assert "POST /v1/chat/completions and POST /v1/responses" in body["error"]["message"]
    status, body = _raw(server.url, "POST", "/v1/responses", {"model": "m", "input": "hi", "stream": "yes"})
    assert status == 400 and body["error"]["code"] == "invalid_request"
