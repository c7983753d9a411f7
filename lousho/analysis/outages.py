"""Provider outages in a stream of stored runs: the windows the stratified monitor leaves out.

The recover loop's outage breaker (``lousho.recover.outage``) keeps only its current state, one row in the run
store, and no history of the windows it was open; the monitor reads the observe store. So the monitor finds
outages in the runs themselves, by this rule:

- a run is a **provider failure** when it ended in an error the breaker would count
  (``lousho.models.errors.is_provider_failure``), as far as the stored run tells: its error type is
  ``rate-limit`` or ``timeout`` (the reference agent's categories; a network failure is a ``timeout``), or
  ``unknown`` with a message ``HTTP 5xx from the model provider``, or an SDK's class for the same errors
  (``RateLimitError``, ``APITimeoutError``, ``APIConnectionError``, ``InternalServerError``, ...). A refused
  request, a bad key, a context overflow or the run's own exception never is: a harness can cause those;
- an **outage window** is a maximal streak of at least ``OUTAGE_RUNS`` (10) consecutive runs, in start order,
  each a provider failure; it spans the first run's start to the last one's.

A partial outage (some requests still answered) makes no streak and is not found; the stratified design's
stated rates assume the windows it is given are the outages (docs/statistics.md's scenarios flag exactly
those). A concurrent design needs none of this: both arms live through the same outage.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

OUTAGE_RUNS = 10  # the scenario table's outage: 10 consecutive failures
PROVIDER_TYPES = frozenset({"rate-limit", "timeout"})
# A 5xx of the reference agent's client (lousho.models.errors.classify): "HTTP 503 from the model provider".
_SERVER_ERROR = re.compile(r"^HTTP 5\d\d from the model provider")
# The openai and anthropic SDKs' classes for the same failures, as other frameworks' runs carry them.
_SDK_TYPES = re.compile(r"(?:^|\.)(?:RateLimitError|APITimeoutError|APIConnectionError|InternalServerError|"
                        r"ServiceUnavailableError|OverloadedError|Timeout|ReadTimeout|ConnectTimeout)$")


def provider_failures(frame: pl.DataFrame) -> np.ndarray:
    """One flag per run of ``frame`` (the ``runs`` view's ``status``, ``error_type``, ``error_message``):
    did it end in a provider failure (the module docstring's rule)?"""
    if frame.height == 0:
        return np.zeros(0, dtype=bool)
    status = frame["status"].to_list()
    types = frame["error_type"].to_list()
    messages = frame["error_message"].to_list() if "error_message" in frame.columns else [None] * frame.height
    return np.array([s == "error" and _provider(t, m) for s, t, m in zip(status, types, messages, strict=True)],
                    dtype=bool)


def outage_windows(frame: pl.DataFrame, run_length: int = OUTAGE_RUNS) -> tuple[tuple[int, int], ...]:
    """The (first start, last start) in ns of every streak of ``run_length`` or more consecutive provider
    failures among ``frame``'s runs, taken in start order."""
    if frame.height == 0:
        return ()
    ordered = frame.sort("started_ns", maintain_order=True)
    failed = provider_failures(ordered)
    starts = np.asarray(ordered["started_ns"].to_list(), dtype=np.int64)
    # Streak boundaries: where the flag turns on and off (padded so a streak at either end closes).
    edges = np.diff(np.concatenate([[0], failed.astype(np.int8), [0]]))
    first, after = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return tuple((int(starts[a]), int(starts[b - 1])) for a, b in zip(first, after, strict=True)
                 if b - a >= run_length)


def _provider(error_type: str | None, message: str | None) -> bool:
    if error_type in PROVIDER_TYPES:
        return True
    if error_type == "unknown":
        return bool(message and _SERVER_ERROR.match(message))
    return bool(error_type and _SDK_TYPES.search(error_type))
