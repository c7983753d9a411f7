"""Provider outages in a stream of stored runs: the windows the stratified monitor leaves out.

The recover loop's outage breaker (``lousho.recover.outage``) keeps only its current state, one row in the run
store, and no history of the windows it was open; the monitor reads the observe store. So the monitor finds
outages in the runs themselves, by the breaker's rule:

- a run is **marked** when the provider failed it, as far as its spans tell: the run ended in an error the
  breaker would count (``lousho.models.errors.is_provider_failure``), or one of its model calls did, even when
  the run went on to a verdict (an outage's runs often end in an apology that fails the check). An error counts
  when its type is ``rate-limit`` or ``timeout`` (the reference agent's categories; a network failure is a
  ``timeout``), or ``unknown`` with a message ``HTTP 5xx from the model provider``, or an SDK's class for the
  same errors (``RateLimitError``, ``APITimeoutError``, ``APIConnectionError``, ``InternalServerError``, ...),
  or a message naming status 429 or 5xx (``Error code: 503``). A refused request, a bad key, a context
  overflow, a tool's error or the run's own exception never is: a harness can cause those, and an edit that
  breaks the agent must count against it, not hide as an outage;
- an **outage window** is a maximal streak of at least ``THRESHOLD`` (the breaker's 3) consecutive marked runs
  in start order (``lousho.kernel.outage_rule.in_outage``, the breaker's rule); it spans the first run's start
  to the last one's.

``in_outage`` is the one rule: the live monitor applies it to stored runs and the traffic model
(``traffic_model``) to its simulated markers, so the scenario table states the rates of what runs live.
A partial outage (some requests still answered) makes no streak and is not found, and an edit that itself made
the provider fail (requests so slow that every one times out) would look like an outage to this rule: the
concurrent design needs none of it, since both arms live through the same outage.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl
from numpy.typing import NDArray

from lousho.kernel.outage_rule import THRESHOLD, in_outage
from lousho.observe.client.store_client import StoreClient
from lousho.observe.runs.runs_view import MODEL_OPERATIONS

PROVIDER_TYPES = frozenset({"rate-limit", "timeout"})
# A 5xx of the reference agent's client (lousho.models.errors.classify): "HTTP 503 from the model provider".
_SERVER_ERROR = re.compile(r"^HTTP 5\d\d from the model provider")
# The openai and anthropic SDKs' classes for the same failures, as other frameworks' runs carry them.
# The Vercel AI SDK retries only what the provider may answer later (429, 5xx, 408, 409, a lost connection) and
# raises AI_RetryError once its retries are spent.
_SDK_TYPES = re.compile(r"(?:^|\.)(?:RateLimitError|APITimeoutError|APIConnectionError|InternalServerError|"
                        r"ServiceUnavailableError|OverloadedError|Timeout|ReadTimeout|ConnectTimeout|AI_RetryError)$")
# The openai SDK's message for an HTTP status (runs_view.OPENAI_STATUS_ERRORS), whatever class carries it: none,
# APIStatusError, or a framework's wrapper (LangChain's OpenAIAPIError('Error code: 500 - ...')).
_STATUS_MESSAGE = re.compile(r"Error code: (?:429|5\d\d)\b")
_CHUNK = 500  # runs per span query: the query names each


def provider_error(error_type: str | None, message: str | None) -> bool:
    """Is an error of this type and message one the breaker counts (the module docstring's rule)?"""
    if error_type in PROVIDER_TYPES:
        return True
    if error_type == "unknown":
        return bool(message and _SERVER_ERROR.match(message))
    if message and _STATUS_MESSAGE.search(message):
        return True
    return bool(error_type and _SDK_TYPES.search(error_type))


def provider_failures(frame: pl.DataFrame) -> NDArray[np.bool_]:
    """One flag per run of ``frame`` (the ``runs`` view's ``status``, ``error_type``, ``error_message``):
    did the run itself end in a provider failure?"""
    if frame.height == 0:
        return np.zeros(0, dtype=bool)
    status = frame["status"].to_list()
    types = frame["error_type"].to_list()
    messages = frame["error_message"].to_list() if "error_message" in frame.columns else [None] * frame.height
    return np.array([s == "error" and provider_error(t, m) for s, t, m in zip(status, types, messages, strict=True)],
                    dtype=bool)


def outage_windows(frame: pl.DataFrame, marked: NDArray[np.bool_] | None = None,
                   threshold: int = THRESHOLD) -> tuple[tuple[int, int], ...]:
    """The (first start, last start) in ns of every ``in_outage`` streak among ``frame``'s runs in start order;
    a run is marked by ``marked`` (one flag per row of ``frame`` as given), else by ``provider_failures``."""
    if frame.height == 0:
        return ()
    flags = provider_failures(frame) if marked is None else np.asarray(marked, dtype=bool)
    started = np.asarray(frame["started_ns"].to_list(), dtype=np.int64)
    order = np.argsort(started, kind="stable")
    starts = started[order]
    inside = in_outage(flags[order], threshold)
    # Streak boundaries: where the flag turns on and off (padded so a streak at either end closes).
    edges = np.diff(np.concatenate([[0], inside.astype(np.int8), [0]]))
    first, after = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return tuple((int(starts[a]), int(starts[b - 1])) for a, b in zip(first, after, strict=True))


def provider_marks(store: StoreClient, frame: pl.DataFrame) -> NDArray[np.bool_]:
    """One flag per run of ``frame`` (the ``runs`` view's rows): did the provider fail the run itself or one of
    its model calls? Only a run that failed or handled an error (``handled_errors``) can be marked, so only
    those runs' spans are read."""
    marked = provider_failures(frame)
    if frame.height == 0:
        return marked
    handled = frame["handled_errors"].fill_null(0).to_numpy() > 0
    errored = np.asarray(frame["status"].to_list()) == "error"
    suspects = np.flatnonzero(~marked & (errored | handled))
    if suspects.size:
        ids, traces = frame["run_id"].to_list(), frame["last_trace_id"].to_list()
        hit = _model_call_failures(store, [ids[i] for i in suspects], [traces[i] for i in suspects])
        marked[suspects] = [ids[i] in hit for i in suspects]
    return marked


def _model_call_failures(store: StoreClient, run_ids: list[str], last_traces: list[str | None]) -> set[str]:
    """The runs among ``run_ids`` one of whose model calls failed with a provider error. A run's traces are
    those with a span carrying its id (every attempt of a run with a lousho run id) and its last trace (a
    run without one is that one trace)."""
    hit: set[str] = set()
    for lo in range(0, len(run_ids), _CHUNK):
        ids, traces = run_ids[lo:lo + _CHUNK], last_traces[lo:lo + _CHUNK]
        values = ", ".join(["(?, ?)"] * len(ids))
        frame = store.sql(
            f"SELECT DISTINCT t.run_id, s.error_type, s.status_message FROM spans s JOIN ("
            f"SELECT DISTINCT run_id, trace_id FROM spans WHERE run_id IN ({', '.join(['?'] * len(ids))}) "
            f"UNION SELECT * FROM (VALUES {values}) AS v(run_id, trace_id)) t ON s.trace_id = t.trace_id "
            f"WHERE s.status_code = 'ERROR' AND {MODEL_OPERATIONS}",
            [*ids, *(v for pair in zip(ids, traces, strict=True) for v in pair)])
        hit.update(r for r, t, m in zip(frame["run_id"].to_list(), frame["error_type"].to_list(),
                                        frame["status_message"].to_list(), strict=True) if provider_error(t, m))
    return hit
