"""The chat client over real HTTP: every scripted fault arrives classified; results round-trip."""

from __future__ import annotations

import json
import time

import pytest
from models_support import (  # noqa: F401 (fixtures, registered by import)
    RawServer,
    client_fixture,
    free_port,
    raw_server_fixture,
    server_fixture,
    shared_server_fixture,
    user,
)

from lousho.models import ChatClient, ChatResult, ModelClient, ModelConfig, ProviderError
from lousho.models.errors import ModelConfigInvalid
from lousho.models.scripted import Fault, ScriptedModelServer

KEY = "sk-test-0123456789abcdef"

# (name in the script, the fault itself, category, code, retryable, HTTP status)
FAULTS = [
    ("500", Fault.status(500), "unknown", "LOUSHO_PROVIDER_UNKNOWN", True, 500),
    ("503", Fault.status(503), "unknown", "LOUSHO_PROVIDER_UNKNOWN", True, 503),
    ("429", Fault.rate_limit(retry_after=2), "rate-limit", "LOUSHO_PROVIDER_RATE_LIMIT", True, 429),
    ("401", Fault.status(401), "auth-failure", "LOUSHO_PROVIDER_AUTH", False, 401),
    ("context", Fault.context_length(), "context-length-exceeded", "LOUSHO_PROVIDER_CONTEXT_LENGTH", False, 400),
    ("hang", Fault.hang(5), "timeout", "LOUSHO_PROVIDER_TIMEOUT", True, None),
]


@pytest.mark.parametrize("how", ["returned by the script", "injected"])
@pytest.mark.parametrize(("name", "fault", "category", "code", "retryable", "status"), FAULTS,
                         ids=[row[0] for row in FAULTS])
def test_each_scripted_fault_reaches_the_client_with_its_category_code_and_retryability(
    server: ScriptedModelServer, client: ChatClient, how: str, name: str, fault: Fault, category: str, code: str,
    retryable: bool, status: int | None,
) -> None:
    if how == "injected":
        server.inject(fault)
        messages = user("hello")
    else:
        messages = user(f"fault {name}")
    with pytest.raises(ProviderError) as caught:
        client.complete(messages)
    error = caught.value
    assert (error.category, error.code, error.retryable, error.status) == (category, code, retryable, status)
    assert error.is_provider_failure is (category in ("unknown", "rate-limit", "timeout"))
    # The next call is answered normally: a fault is one answer, not a state.
    assert client.complete(user("after")).content == "echo: after"


def test_a_rate_limit_carries_retry_after_in_seconds(client: ChatClient) -> None:
    with pytest.raises(ProviderError) as caught:
        client.complete(user("fault 429"))
    assert caught.value.retry_after == 2


def test_a_hang_fails_after_the_clients_timeout_not_the_hangs_length(client: ChatClient) -> None:
    started = time.monotonic()
    with pytest.raises(ProviderError, match="timed out"):
        client.complete(user("fault hang"))
    assert time.monotonic() - started < 4


def test_connection_refused_is_a_retryable_timeout() -> None:
    client = ChatClient(f"http://127.0.0.1:{free_port()}/v1", "m", timeout=5)
    with pytest.raises(ProviderError) as caught:
        client.complete(user("hello"))
    error = caught.value
    assert (error.category, error.code, error.retryable, error.status) == (
        "timeout", "LOUSHO_PROVIDER_TIMEOUT", True, None)
    assert error.is_provider_failure


def test_an_unresolvable_host_is_a_retryable_timeout() -> None:
    # .invalid never resolves (RFC 2606), so this needs no network.
    with pytest.raises(ProviderError) as caught:
        ChatClient("http://model.invalid/v1", "m", timeout=5).complete(user("hello"))
    assert (caught.value.category, caught.value.retryable) == ("timeout", True)


def test_tool_calls_and_usage_round_trip_through_http_and_json(server: ScriptedModelServer,
                                                                client: ChatClient) -> None:
    tools = [{"type": "function", "function": {"name": "lookup_order", "description": "Find an order",
                                               "parameters": {"type": "object", "properties": {}}}}]
    result = client.complete(user("tools"), tools)
    assert result.content == "checking"
    assert result.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments, c.arguments_valid) for c in result.tool_calls] == [
        ("call_1", "lookup_order", {"order_id": "A-1"}, True),
        ("call_2", "refund", {"amount": 5, "reason": "late"}, True),
    ]
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.usage.total_tokens == result.raw["usage"]["total_tokens"]
    assert result.model == "scripted-1"
    # Durable runs record results as JSON step outputs and replay them.
    assert ChatResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result

    # The transcript goes back in OpenAI's shape, and the model sees which tool answered.
    messages = [*user("tools"), result.as_message(),
                {"role": "tool", "tool_call_id": "call_1", "content": "shipped"}]
    assert client.complete(messages, tools).content == "the lookup_order tool said shipped"
    assert server.requests[-1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"order_id": "A-1"}'


def test_cache_read_tokens_reach_the_result_and_round_trip() -> None:
    # The script reports a usage with 700 of 1,000 input tokens read from the cache, as OpenAI's
    # prompt_tokens_details.cached_tokens says it; an older recorded result without the field loads with 0.
    reply = {"content": "hi", "usage": {"input_tokens": 1000, "output_tokens": 20, "cache_read_tokens": 700}}
    with ScriptedModelServer(lambda request: reply) as server:
        result = ChatClient(server.url, "m", timeout=5).complete(user("hello"))
    assert result.raw["usage"]["prompt_tokens_details"] == {"cached_tokens": 700}
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cache_read_tokens) == (1000, 20, 700)
    assert ChatResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    old = result.to_dict()
    del old["usage"]["cache_read_tokens"]
    assert ChatResult.from_dict(old).usage.cache_read_tokens == 0


def test_arguments_that_are_not_json_keep_the_raw_text_and_a_flag(client: ChatClient) -> None:
    (call,) = client.complete(user("bad arguments")).tool_calls
    assert (call.name, call.arguments, call.raw_arguments, call.arguments_valid) == (
        "lookup_order", {}, "{not json", False)
    assert call.to_openai()["function"]["arguments"] == "{not json"


def test_the_same_usage_for_the_same_exchange(client: ChatClient) -> None:
    assert client.complete(user("hello")).usage == client.complete(user("hello")).usage


def test_optional_parameters_are_sent_only_when_given(server: ScriptedModelServer, client: ChatClient) -> None:
    client.complete(user("a"))
    client.complete(user("b"), temperature=0.0, seed=7, max_tokens=64)
    first, second = server.requests
    assert first["params"] == {}
    assert second["params"] == {"temperature": 0.0, "seed": 7, "max_tokens": 64}


def test_an_empty_tool_list_is_not_sent(raw_server: RawServer) -> None:
    raw_server.answer(200, {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]})
    ChatClient(raw_server.url, "m").complete(user("a"), [])
    assert raw_server.bodies == [{"model": "m", "messages": [{"role": "user", "content": "a"}]}]


def test_the_key_is_sent_as_a_bearer_token_and_shown_nowhere(raw_server: RawServer) -> None:
    client = ChatClient(raw_server.url, "m", api_key=KEY)
    raw_server.answer(401, {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}})
    with pytest.raises(ProviderError) as caught:
        client.complete(user("hello"))
    assert raw_server.seen[-1]["authorization"] == f"Bearer {KEY}"
    error = caught.value
    for text in (repr(client), str(client), str(error), repr(error), json.dumps(error.to_dict()), error.hint):
        assert KEY not in text and KEY[3:] not in text
    assert "api_key='***'" in repr(client)


def test_no_key_no_authorization_header(raw_server: RawServer) -> None:
    raw_server.answer(200, {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]})
    result = ChatClient(raw_server.url, "m").complete(user("hello"))
    assert "authorization" not in raw_server.seen[-1]
    assert (result.content, result.usage.total_tokens) == ("hi", 0)


@pytest.mark.parametrize("body", [b"<html>not an API</html>", b'{"object": "list"}', b"[]"])
def test_a_2xx_that_is_not_a_completion_is_a_bad_response_not_retried(raw_server: RawServer, body: bytes) -> None:
    raw_server.answer(200, body)
    with pytest.raises(ProviderError) as caught:
        ChatClient(raw_server.url, "m").complete(user("hello"))
    assert (caught.value.code, caught.value.category, caught.value.retryable) == (
        "LOUSHO_PROVIDER_BAD_RESPONSE", "unknown", False)


def test_retry_after_as_an_http_date_is_honoured(raw_server: RawServer) -> None:
    raw_server.answer(429, b"", Retry_After=time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 60)))
    with pytest.raises(ProviderError) as caught:
        ChatClient(raw_server.url, "m").complete(user("hello"))
    assert 50 < (caught.value.retry_after or 0) <= 61


def test_messages_that_are_not_objects_are_the_callers_bug_and_never_sent(server: ScriptedModelServer) -> None:
    client = ChatClient(server.url, "m")
    with pytest.raises(TypeError, match="messages"):
        client.complete([{"role": "user", "content": "x"}, "not a message"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="tools"):
        client.complete(user("x"), ["lookup"])  # type: ignore[list-item]
    assert server.requests == []


def test_the_chat_client_is_a_model_client() -> None:
    assert isinstance(ChatClient("http://127.0.0.1:1/v1", "m"), ModelClient)


@pytest.mark.parametrize("url", ["ftp://host/v1", "127.0.0.1:8000/v1", "http:///v1", "http://host:99999/v1"])
def test_a_bad_base_url_is_a_usage_error(url: str) -> None:
    with pytest.raises(ModelConfigInvalid) as caught:
        ChatClient(url, "m")
    assert caught.value.code == "LOUSHO_MODELS_CONFIG_INVALID"


def test_credentials_in_the_base_url_are_not_shown() -> None:
    client = ChatClient("http://user:hunter2@127.0.0.1:1/v1", "m")
    assert "hunter2" not in repr(client) and "hunter2" not in client.endpoint


def test_model_config_reads_the_key_from_the_mapping_it_is_given(server: ScriptedModelServer) -> None:
    config = ModelConfig(server.url, "scripted-1", api_key_env="MY_KEY", timeout=5)
    assert config.api_key({"MY_KEY": KEY}) == KEY
    assert config.api_key({"MY_KEY": ""}) is None and config.api_key({}) is None
    client = config.client({"MY_KEY": KEY})
    assert (client.model, client.timeout) == ("scripted-1", 5)
    assert client.complete(user("hi")).content == "echo: hi"
    assert KEY not in repr(config) and KEY not in repr(client)


@pytest.mark.parametrize("kwargs", [{"timeout": 0}, {"model": ""}, {"url": "nope"}])
def test_model_config_refuses_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ModelConfigInvalid):
        ModelConfig(**{"url": "http://127.0.0.1:1/v1", "model": "m", **kwargs})  # type: ignore[arg-type]
