"""Outage windows in stored runs: streaks of 3 or more provider failures (the breaker's), and nothing a harness
can cause."""

from __future__ import annotations

import polars as pl

from lousho.analysis.outages import outage_windows, provider_error, provider_failures
from lousho.kernel.outage_rule import THRESHOLD


def _frame(rows: list[tuple[str, str | None, str | None]]) -> pl.DataFrame:
    """Runs one second apart: (status, error type, error message)."""
    return pl.DataFrame({"started_ns": [i * 1_000_000_000 for i in range(len(rows))],
                         "status": [r[0] for r in rows], "error_type": [r[1] for r in rows],
                         "error_message": [r[2] for r in rows]})


OK = ("ok", None, None)
LIMIT = ("error", "rate-limit", "HTTP 429 from the model provider")


def test_three_consecutive_provider_failures_make_a_window_and_two_do_not() -> None:
    assert THRESHOLD == 3  # the breaker's: the loop pauses after 3 in a row
    rows = [OK] * 5 + [LIMIT] * 2 + [OK] + [LIMIT] * 3 + [OK] * 3 + [LIMIT] * 12
    assert outage_windows(_frame(rows)) == ((8 * 10**9, 10 * 10**9), (14 * 10**9, 25 * 10**9))


def test_what_counts_as_a_provider_failure_is_what_the_breaker_counts() -> None:
    rows = [LIMIT, ("error", "timeout", "request to http://m/v1 timed out"),
            ("error", "unknown", "HTTP 503 from the model provider: overloaded"),
            ("error", "RateLimitError", "Error code: 429"), ("error", "openai.APIConnectionError", "refused"),
            ("error", "InternalServerError", "Error code: 500"),
            # A harness can cause these: never an outage.
            ("error", "unknown", "HTTP 400 from the model provider: bad tool schema"),
            ("error", "context-length-exceeded", "HTTP 400 ..."), ("error", "auth-failure", "HTTP 401 ..."),
            ("error", "ValueError", "ValueError: boom"), ("error", "no-progress", "the same call 3 times"),
            ("ok", "rate-limit", None)]
    assert provider_failures(_frame(rows)).tolist() == [True] * 6 + [False] * 6


def test_a_streak_of_crashes_an_edit_causes_is_no_outage() -> None:
    assert outage_windows(_frame([("error", "ValueError", "ValueError: boom")] * 30)) == ()
    assert outage_windows(_frame([])) == ()


def test_a_model_calls_error_counts_as_the_breaker_counts_it() -> None:
    # As failed model-call spans carry them: the reference agent's categories, an SDK's class, or only the
    # openai SDK's "Error code: N" message.
    assert provider_error("unknown", "HTTP 502 from the model provider: bad gateway")
    assert provider_error("openai.InternalServerError", "Error code: 500 - {}")
    assert provider_error(None, "Error code: 503 - {'error': 'overloaded'}")
    assert provider_error("APIStatusError", "Error code: 529 - overloaded")
    assert not provider_error(None, "Error code: 400 - invalid tool schema")
    assert not provider_error("BadRequestError", "Error code: 400 - invalid tool schema")
    assert not provider_error("AuthenticationError", "Error code: 401 - invalid api key")
    assert not provider_error(None, None)
