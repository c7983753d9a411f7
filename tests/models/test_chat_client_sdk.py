"""The chat client is the official openai SDK with lousho's policy: one request per call (the SDK's own retries
are off: the recover loop owns retry policy), the provider's wait carried in the error, Azure-style URLs."""

from __future__ import annotations

from pathlib import Path

import pytest
from models_support import RawServer, raw_server_fixture, user  # noqa: F401 (fixtures, registered by import)

from lousho.models import ChatClient, ProviderError

COMPLETION = {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}


def test_requests_go_through_the_openai_sdk(raw_server: RawServer) -> None:
    raw_server.answer(200, COMPLETION)
    assert ChatClient(raw_server.url, "m").complete(user("hello")).content == "hi"
    assert raw_server.seen[-1]["user-agent"].startswith("OpenAI/Python")
    assert raw_server.paths == ["/v1/chat/completions"]


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_retryable_failure_is_one_request_not_the_sdks_retries(raw_server: RawServer, status: int) -> None:
    raw_server.answer(status, {"error": {"message": "busy"}}, Retry_After="0")
    with pytest.raises(ProviderError) as caught:
        ChatClient(raw_server.url, "m", timeout=5).complete(user("hello"))
    assert caught.value.status == status and caught.value.retryable
    assert len(raw_server.seen) == 1


def test_retry_after_ms_is_carried_in_seconds(raw_server: RawServer) -> None:
    raw_server.answer(429, {"error": {"message": "slow down"}}, retry_after_ms="1500", Retry_After="9")
    with pytest.raises(ProviderError) as caught:
        ChatClient(raw_server.url, "m").complete(user("hello"))
    assert (caught.value.category, caught.value.retry_after) == ("rate-limit", 1.5)


def test_an_azure_style_base_url_keeps_its_query_on_every_request(raw_server: RawServer) -> None:
    raw_server.answer(200, COMPLETION)
    base = raw_server.url.removesuffix("/v1") + "/openai/deployments/gpt?api-version=2024-06-01"
    client = ChatClient(base, "gpt", api_key="sk-azure-0123456789")
    client.complete(user("a"))
    client.complete(user("b"))
    assert raw_server.paths == ["/openai/deployments/gpt/chat/completions?api-version=2024-06-01"] * 2
    assert "api-version" not in client.endpoint and "sk-azure" not in repr(client)


def test_no_module_builds_http_requests_to_a_model_by_hand() -> None:
    """Only the daemon's own client speaks raw HTTP; every model call goes through the SDK client."""
    import lousho

    root = Path(lousho.__file__).parent
    raw = ("import http.client", "from http.client", "urllib.request", "import requests")
    by_hand = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")
                     if any(marker in p.read_text(encoding="utf-8") for marker in raw))
    assert by_hand == ["observe/client/store_client.py"]
    assert "import openai" in (root / "models" / "client.py").read_text(encoding="utf-8")


def test_a_client_nobody_closed_closes_its_connections_when_it_is_collected(raw_server: RawServer) -> None:
    import gc

    raw_server.answer(200, COMPLETION)
    client = ChatClient(raw_server.url, "m")
    client.complete(user("hi"))
    sdk = client._client()  # the SDK's HTTP client, held here past the ChatClient
    client.itself = client  # collected only by the cycle collector, in whatever order it finalizes
    del client
    gc.collect()
    assert sdk.is_closed()
