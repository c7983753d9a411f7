"""The provider error taxonomy on its own: classify() is pure, so each rule is one row."""

from __future__ import annotations

import email.utils
import json
import pickle

import pytest

from lousho.models.errors import (
    CATEGORIES,
    NoRuleMatched,
    ProviderError,
    ScriptNotFound,
    ScriptRaised,
    classify,
    is_provider_failure,
    network_error,
    parse_retry_after,
)
from lousho.models.faults import Fault


def openai_error(message: str, code: str | None = None, kind: str = "invalid_request_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


@pytest.mark.parametrize(
    ("status", "body", "category", "code", "retryable"),
    [
        (401, openai_error("Incorrect API key provided.", "invalid_api_key"), "auth-failure", "LOUSHO_PROVIDER_AUTH",
         False),
        (403, b"Forbidden", "auth-failure", "LOUSHO_PROVIDER_AUTH", False),
        (429, openai_error("Rate limit reached", "rate_limit_exceeded"), "rate-limit", "LOUSHO_PROVIDER_RATE_LIMIT",
         True),
        (408, b"", "timeout", "LOUSHO_PROVIDER_TIMEOUT", True),
        (400, openai_error("This model's maximum context length is 8192 tokens.", "context_length_exceeded"),
         "context-length-exceeded", "LOUSHO_PROVIDER_CONTEXT_LENGTH", False),
        # The code alone is enough, and so is the message alone (Anthropic words it this way).
        (400, openai_error("too big", "context_length_exceeded"), "context-length-exceeded",
         "LOUSHO_PROVIDER_CONTEXT_LENGTH", False),
        (400, openai_error("prompt is too long: 210000 tokens > 200000 maximum"), "context-length-exceeded",
         "LOUSHO_PROVIDER_CONTEXT_LENGTH", False),
        (413, b"Request too large: reduce the length of the messages", "context-length-exceeded",
         "LOUSHO_PROVIDER_CONTEXT_LENGTH", False),
        # A 4xx without a status of its own falls back on the message patterns (internals 3.3).
        (400, openai_error("Invalid API key in request"), "auth-failure", "LOUSHO_PROVIDER_AUTH", False),
        (400, openai_error("Too many requests, slow down"), "rate-limit", "LOUSHO_PROVIDER_RATE_LIMIT", True),
        (400, openai_error("Unknown parameter: 'foo'"), "unknown", "LOUSHO_PROVIDER_BAD_REQUEST", False),
        (404, openai_error("The model `gpt-9` does not exist", "model_not_found"), "unknown",
         "LOUSHO_PROVIDER_BAD_REQUEST", False),
        (422, None, "unknown", "LOUSHO_PROVIDER_BAD_REQUEST", False),
        (500, openai_error("The server had an error", kind="server_error"), "unknown", "LOUSHO_PROVIDER_UNKNOWN",
         True),
        (502, b"<html>Bad Gateway</html>", "unknown", "LOUSHO_PROVIDER_UNKNOWN", True),
        (503, openai_error("overloaded", kind="server_error"), "unknown", "LOUSHO_PROVIDER_UNKNOWN", True),
        (302, b"", "unknown", "LOUSHO_PROVIDER_BAD_RESPONSE", False),
    ],
)
def test_classify_maps_status_and_body_to_category_code_and_retryability(
    status: int, body: bytes | None, category: str, code: str, retryable: bool
) -> None:
    error = classify(status, body, {})
    assert (error.category, error.code, error.retryable, error.status) == (category, code, retryable, status)
    assert error.hint


def test_a_5xx_is_retryable_unknown_whatever_its_text_says() -> None:
    # The patterns would read "authentication" as a bad key; on a 5xx the provider is at fault.
    error = classify(503, openai_error("authentication service unavailable", kind="server_error"))
    assert (error.category, error.retryable, error.is_provider_failure) == ("unknown", True, True)


def test_classify_accepts_a_parsed_body_and_header_pairs() -> None:
    error = classify(429, {"error": {"message": "slow down"}}, [("Retry-After", "3")])
    assert (error.category, error.retry_after) == ("rate-limit", 3.0)
    assert "slow down" in error.message


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"Retry-After": "-3"}, 0.0),
        ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5),
        ({"Retry-After": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_from_seconds_and_milliseconds(headers: dict[str, str], expected: float | None) -> None:
    assert classify(429, b"", headers).retry_after == expected


def test_retry_after_is_read_from_an_http_date() -> None:
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(None, date, now=now) == pytest.approx(30.0)
    assert parse_retry_after(None, email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0


def test_a_rate_limit_without_retry_after_leaves_the_wait_to_the_caller() -> None:
    assert classify(429, b"").retry_after is None
    assert Fault.rate_limit(retry_after=None).headers == {}


def test_the_stored_form_is_exactly_message_code_category_retryable_and_round_trips() -> None:
    error = classify(429, openai_error("Rate limit reached"), {"Retry-After": "2"})
    stored = json.loads(json.dumps(error.to_dict()))
    assert set(stored) == {"message", "code", "category", "retryable"}
    back = ProviderError.from_dict(stored)
    assert back.to_dict() == stored
    assert (back.code, back.category, back.retryable, back.hint) == (error.code, error.category, True, error.hint)


def test_from_dict_keeps_stored_values_over_the_codes_defaults() -> None:
    stored = {"message": "m", "code": "LOUSHO_PROVIDER_UNKNOWN", "category": "unknown", "retryable": False,
              "extra": 1}
    assert ProviderError.from_dict(stored).retryable is False


def test_a_provider_error_survives_pickling_with_category_status_and_retry_after() -> None:
    error = classify(429, openai_error("Rate limit reached"), {"Retry-After": "2"})
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is ProviderError
    assert (back.message, back.code, back.category, back.retryable, back.status, back.retry_after, back.hint) == (
        error.message, error.code, error.category, error.retryable, 429, 2.0, error.hint)


@pytest.mark.parametrize(
    ("category", "retryable", "counts"),
    [
        ("rate-limit", True, True),
        ("timeout", True, True),
        ("unknown", True, True),
        ("auth-failure", False, False),
        ("unknown", False, False),  # a bad request
        ("context-length-exceeded", False, False),
        (None, False, False),  # not a provider error at all
    ],
)
def test_only_failures_on_the_providers_side_count_towards_an_outage(
    category: str | None, retryable: bool, counts: bool
) -> None:
    assert is_provider_failure(category, retryable) is counts


def test_a_bad_key_is_never_an_outage() -> None:
    for status in (401, 403):
        assert classify(status, b"").is_provider_failure is False


def test_network_failures_are_retryable_timeouts_naming_the_endpoint() -> None:
    for exc in (ConnectionRefusedError(111, "Connection refused"), TimeoutError("timed out"),
                ConnectionResetError(104, "reset")):
        error = network_error("http://127.0.0.1:9/v1/chat/completions", exc)
        assert (error.category, error.code, error.retryable, error.status) == (
            "timeout", "LOUSHO_PROVIDER_TIMEOUT", True, None)
        assert "127.0.0.1:9" in error.message


def test_key_shaped_strings_in_a_provider_answer_never_reach_the_message() -> None:
    error = classify(401, openai_error("Incorrect API key provided: sk-proj-abcdef1234567890. Bearer xyz123"))
    assert "sk-proj" not in error.message and "xyz123" not in error.message
    assert "[REDACTED]" in error.message


def test_long_provider_messages_are_truncated() -> None:
    error = classify(500, b"x" * 10_000)
    assert len(error.message) <= 520 and error.message.endswith("... (truncated)")


def test_a_category_outside_the_taxonomy_is_refused() -> None:
    assert CATEGORIES == ("auth-failure", "rate-limit", "timeout", "context-length-exceeded", "unknown")
    with pytest.raises(ValueError, match="category"):
        ProviderError("m", category="outage")


@pytest.mark.parametrize("cls", [ScriptNotFound, ScriptRaised, NoRuleMatched])
def test_script_errors_survive_pickling_and_name_their_file(cls: type[ScriptNotFound]) -> None:
    error = cls("/tmp/bot.py", "something went wrong")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert (back.code, back.path, back.message, back.hint) == (error.code, "/tmp/bot.py", error.message, error.hint)
    assert back.code.startswith("LOUSHO_MODELS_") and "/tmp/bot.py" in back.hint
