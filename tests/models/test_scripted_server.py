"""The scripted model server: seeded randomness, the request log, faults at runtime, bad scripts."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from models_support import (  # noqa: F401 (fixtures, registered by import)
    RULES,
    SUPPORT_DESK,
    client_fixture,
    server_fixture,
    shared_server_fixture,
    user,
    write_script_fixture,
)
from socket_support import server_side_nodelay

from lousho.models import ChatClient, ProviderError
from lousho.models.errors import ScriptError, classify
from lousho.models.scripted import Fault, ScriptedModelServer, ScriptRequest


def call(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def draw(seed: int, text: str = "random") -> str:
    with ScriptedModelServer(SUPPORT_DESK, seed=seed) as server:
        return ChatClient(server.url, "m").complete(user(text)).content or ""


def test_the_same_request_gets_the_same_randomness_on_two_servers_with_the_same_seed() -> None:
    assert draw(7) == draw(7)


def test_another_seed_or_another_request_gets_other_randomness() -> None:
    assert draw(7) != draw(8)
    with ScriptedModelServer(SUPPORT_DESK, seed=7) as server:
        client = ChatClient(server.url, "m")
        a = client.complete(user("random")).content
        b = client.complete(user("random", system="another prompt")).content
        assert a != b
        # A retry of the same request draws the same numbers again.
        assert client.complete(user("random")).content == a


def test_count_says_how_often_this_exact_request_arrived(server: ScriptedModelServer, client: ChatClient) -> None:
    assert [client.complete(user("count")).content for _ in range(3)] == ["count=1", "count=2", "count=3"]
    assert client.complete(user("count", system="s")).content == "count=1"


def test_the_request_log_shows_what_the_model_was_shown(server: ScriptedModelServer, client: ChatClient) -> None:
    tools = [{"type": "function", "function": {"name": "refund", "description": "Refund an order",
                                               "parameters": {"type": "object"}}}]
    client.complete(user("hello", system="You are a support agent."), tools, seed=3)
    (entry,) = server.requests
    assert entry["system"] == "You are a support agent."
    assert entry["tools"] == tools
    assert entry["messages"] == user("hello", system="You are a support agent.")
    assert (entry["n"], entry["status"], entry["count"], entry["params"]) == (1, 200, 1, {"seed": 3})
    assert entry["reply"] == {"role": "assistant", "content": "echo: hello"}
    # The same log over HTTP, for a server in another process.
    status, log = call(server.url, "GET", "/_lousho/requests")
    assert status == 200 and log == server.requests


def test_a_script_that_raises_answers_500_and_the_next_request_succeeds(
    server: ScriptedModelServer, client: ChatClient
) -> None:
    with pytest.raises(ProviderError) as caught:
        client.complete(user("raise"))
    assert caught.value.status == 500 and caught.value.retryable
    assert "LOUSHO_MODELS_SCRIPT_RAISED" in caught.value.message
    assert "RuntimeError: the script broke" in caught.value.message
    assert str(SUPPORT_DESK) in caught.value.message
    assert client.complete(user("hello")).content == "echo: hello"
    assert [e["status"] for e in server.requests] == [500, 200]


def test_a_reply_that_is_not_a_reply_answers_500(client: ChatClient) -> None:
    with pytest.raises(ProviderError, match="respond\\(\\) returned NoneType"):
        client.complete(user("none"))


def test_faults_posted_at_runtime_answer_the_next_requests_then_the_script_resumes(
    server: ScriptedModelServer, client: ChatClient
) -> None:
    status, queued = call(server.url, "POST", "/_lousho/faults", {"faults": [
        {"fault": "status", "status": 503, "times": 2}, {"fault": "rate_limit", "retry_after": 1}]})
    assert (status, queued) == (200, {"queued": 3})
    seen = []
    for _ in range(4):
        try:
            seen.append(client.complete(user("hello")).content)
        except ProviderError as e:
            seen.append(e.status)
    assert seen == [503, 503, 429, "echo: hello"]
    assert [e["injected"] for e in server.requests] == [True, True, True, False]


def test_deleting_the_fault_queue_lets_requests_through(server: ScriptedModelServer, client: ChatClient) -> None:
    server.inject(Fault.status(500), times=5)
    assert call(server.url, "DELETE", "/_lousho/faults") == (200, {"queued": 0})
    assert client.complete(user("hello")).content == "echo: hello"


@pytest.mark.parametrize("body", [{"messages": "hello"}, {"model": "m"}, [1, 2], {"messages": ["hello"]}])
def test_a_malformed_chat_request_is_a_400_the_client_would_not_retry(server: ScriptedModelServer,
                                                                      body: Any) -> None:
    status, answer = call(server.url, "POST", "/v1/chat/completions", body)
    assert status == 400
    error = classify(status, answer)
    assert (error.code, error.retryable) == ("LOUSHO_PROVIDER_BAD_REQUEST", False)
    assert server.requests[-1]["status"] == 400


def test_a_bad_fault_is_refused_with_400(server: ScriptedModelServer) -> None:
    status, body = call(server.url, "POST", "/_lousho/faults", {"faults": [{"fault": "meteor"}]})
    assert status == 400 and "meteor" in body["error"]["message"]


def test_an_injected_hang_answers_with_the_script_once_it_is_over(server: ScriptedModelServer) -> None:
    server.inject(Fault.hang(0.3))
    started = time.monotonic()
    assert ChatClient(server.url, "m", timeout=10).complete(user("hello")).content == "echo: hello"
    assert time.monotonic() - started >= 0.3
    assert server.requests[-1]["fault"] == {"fault": "hang", "seconds": 0.3}


def test_stopping_does_not_wait_out_a_hang() -> None:
    server = ScriptedModelServer(SUPPORT_DESK).start()
    server.inject(Fault.hang(60))
    with pytest.raises(ProviderError):
        ChatClient(server.url, "m", timeout=0.2).complete(user("hello"))
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5


def test_tool_call_ids_are_numbered_after_those_already_in_the_transcript(client: ChatClient) -> None:
    first = client.complete(user("tools"))
    later = [*user("tools"), first.as_message(), {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
             {"role": "tool", "tool_call_id": "call_2", "content": "ok"}, {"role": "user", "content": "tools"}]
    again = client.complete(later)
    assert [c.id for c in first.tool_calls] == ["call_1", "call_2"]
    assert [c.id for c in again.tool_calls] == ["call_3", "call_4"]
    assert [c.id for c in client.complete(user("tools")).tool_calls] == ["call_1", "call_2"]


def test_both_paths_answer(server: ScriptedModelServer) -> None:
    base = server.url.removesuffix("/v1")
    assert ChatClient(base, "m").complete(user("hi")).content == "echo: hi"
    assert [e["path"] for e in server.requests] == ["/chat/completions"]


def test_the_server_turns_nagle_off_on_a_kept_alive_connection(server: ScriptedModelServer) -> None:
    """uvicorn sends a response's head and body separately: with Nagle on, the body waited for the
    client's delayed ACK, about 40 ms on every call over a reused connection."""
    parts = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        for _ in range(2):
            conn.request("POST", "/v1/chat/completions", body=json.dumps({"model": "m", "messages": user("hi")}),
                         headers={"content-type": "application/json"})
            assert conn.getresponse().read()
        assert conn.sock is not None
        assert server_side_nodelay(os.getpid(), conn.sock)
    finally:
        conn.close()


def test_a_callable_script_sees_the_request_view() -> None:
    seen: list[ScriptRequest] = []

    def respond(request: ScriptRequest) -> str:
        seen.append(request)
        return "ok"

    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "find A-1"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c9", "content": "found"},
    ]
    with ScriptedModelServer(respond) as server:
        ChatClient(server.url, "gpt-test").complete(messages)
    (request,) = seen
    assert (request.model, request.system, request.last_user, request.turn, request.count) == (
        "gpt-test", "Be brief.", "find A-1", 1, 1)
    assert request.last_tool is not None
    assert (request.last_tool.name, request.last_tool.id, request.last_tool.content) == ("lookup", "c9", "found")


def test_json_rules_answer_by_first_match_and_replies_follow_the_count() -> None:
    with ScriptedModelServer(RULES) as server:
        client = ChatClient(server.url, "m")
        (call_,) = client.complete(user("I want a refund")).tool_calls
        assert (call_.id, call_.name, call_.arguments) == ("call_1", "lookup_order", {"order_id": "A-1"})
        after = [*user("I want a refund"), {"role": "assistant", "content": None, "tool_calls": [call_.to_openai()]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "status: shipped"}]
        assert client.complete(after).content == "Your order has shipped."
        assert client.complete(user("hello", system="Talk like a pirate.")).content == "Arr."
        outcomes = []
        for _ in range(4):
            try:
                outcomes.append(client.complete(user("flaky")).content)
            except ProviderError as e:
                outcomes.append((e.category, e.retry_after))
        assert outcomes == [("unknown", None), ("rate-limit", 1.0), "recovered", "recovered"]


def test_a_json_script_without_a_matching_rule_answers_500_with_its_code() -> None:
    with ScriptedModelServer(RULES) as server:
        with pytest.raises(ProviderError, match="LOUSHO_MODELS_NO_RULE_MATCHED"):
            ChatClient(server.url, "m").complete(user("something else"))


BAD_SCRIPTS = [
    ("missing.py", None, "LOUSHO_MODELS_SCRIPT_NOT_FOUND"),
    ("quiet.py", "def answer(request):\n    return 'hi'\n", "LOUSHO_MODELS_SCRIPT_NO_RESPOND"),
    ("broken.py", "def respond(request)\n    return 'hi'\n", "LOUSHO_MODELS_SCRIPT_INVALID"),
    ("crashes.py", "raise RuntimeError('at import')\n", "LOUSHO_MODELS_SCRIPT_INVALID"),
    ("bad.json", "[{", "LOUSHO_MODELS_SCRIPT_INVALID"),
    ("object.json", '{"when": {}}', "LOUSHO_MODELS_SCRIPT_INVALID"),
    ("typo.json", '[{"when": {"last_user_contain": "x"}, "reply": "y"}]', "LOUSHO_MODELS_SCRIPT_INVALID"),
    ("fault.json", '[{"reply": {"fault": "status", "status": 200}}]', "LOUSHO_MODELS_SCRIPT_INVALID"),
    ("script.txt", "respond", "LOUSHO_MODELS_SCRIPT_INVALID"),
]


@pytest.mark.parametrize(("name", "text", "code"), BAD_SCRIPTS, ids=[row[0] for row in BAD_SCRIPTS])
def test_bad_script_files_raise_coded_errors_naming_the_file(
    write_script: Callable[[str, str], Path], tmp_path: Path, name: str, text: str | None, code: str
) -> None:
    path = write_script(name, text) if text is not None else tmp_path / name
    with pytest.raises(ScriptError) as caught:
        ScriptedModelServer(path)
    assert caught.value.code == code
    assert str(path) in caught.value.hint and str(path) in caught.value.message


def test_the_log_file_gets_one_sorted_json_line_per_request(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with ScriptedModelServer(SUPPORT_DESK, log_path=log) as server:
        client = ChatClient(server.url, "m")
        client.complete(user("one"))
        with pytest.raises(ProviderError):
            client.complete(user("fault 401"))
        in_memory = server.requests
    lines = log.read_text().splitlines()
    assert [json.loads(line) for line in lines] == in_memory
    assert all(line == json.dumps(json.loads(line), sort_keys=True) for line in lines)
    assert [e["status"] for e in in_memory] == [200, 401]
    assert in_memory[1]["fault"] == {"fault": "status", "status": 401}


def test_reset_forgets_requests_counts_and_faults_and_ends_a_hang(server: ScriptedModelServer) -> None:
    client = ChatClient(server.url, "m", timeout=0.3)
    client.complete(user("count"))
    server.inject(Fault.hang(60))
    server.inject(Fault.status(500), times=3)
    with pytest.raises(ProviderError):
        client.complete(user("hello"))
    server.reset()
    assert server.requests == []
    assert client.complete(user("count")).content == "count=1"
    time.sleep(0.2)  # the cut-short hang answers now, and is not logged as one of the new requests
    assert [e["reply"]["content"] for e in server.requests] == ["count=1"]


def test_importing_the_client_side_does_not_load_a_web_server() -> None:
    code = "import sys, lousho.models; print(sorted(m for m in ('uvicorn', 'starlette') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr
