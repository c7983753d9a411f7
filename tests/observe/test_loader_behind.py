"""A loader that falls behind the acks says so once, with the cause to look at first (its lowered priority), and
again only after it has caught up and fallen behind anew."""

from __future__ import annotations

import logging
import time

import pytest
from otlp_bodies import chat_span, new_ids, request

from lousho.observe.decode import otlp_native
from lousho.observe.metrics import Metrics
from lousho.observe.store import writer as writer_module
from lousho.observe.store import writer_upkeep
from lousho.observe.store.span_store import SpanStore
from lousho.observe.store.writer import Writer


def test_the_loader_warns_at_the_default_read_wait() -> None:
    assert writer_upkeep.BEHIND_WARN_S == writer_module.READ_WAIT_S


def _send(writer: Writer) -> None:
    body = request([chat_span(*new_ids()) for _ in range(5)]).SerializeToString()
    writer.submit(otlp_native.check_protobuf(body), len(body), body).result(10)


def _behind_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return [m for m in messages if "behind the acks" in m]


def _episode(writer: Writer) -> None:
    """Requests every 0.1 s for 1.5 s into a loader that pauses 1 s before each load, then quiet until loaded.
    Each load but the last leaves requests queued (only a pause of a second between two would empty it)."""
    for _ in range(15):
        _send(writer)
        time.sleep(0.1)
    assert writer.wait_loaded(10) == 0


def test_a_loader_behind_warns_once_per_episode_and_names_its_priority(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(writer_upkeep, "BEHIND_WARN_S", 0.5)
    caplog.set_level(logging.WARNING, logger=writer_module.__name__)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    writer = Writer(store, Metrics(), capacity_bytes=1 << 20, commit_delay=1.0, nice=10)
    try:
        _send(writer)
        assert writer.wait_loaded(10) == 0
        assert _behind_warnings(caplog) == []  # one request: nothing is left behind between loads
        _episode(writer)
        first = _behind_warnings(caplog)
        assert len(first) == 1, first  # several loads ended behind; one warning
        assert "10 nice steps below the request path" in first[0] and "--loader-nice 0" in first[0], first
        _episode(writer)
        assert len(_behind_warnings(caplog)) == 2  # caught up in between: a new episode warns again
    finally:
        writer.close(10)
        store.close()


def test_a_loader_at_the_request_paths_priority_warns_without_the_priority_hint(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(writer_upkeep, "BEHIND_WARN_S", 0.5)
    caplog.set_level(logging.WARNING, logger=writer_module.__name__)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    writer = Writer(store, Metrics(), capacity_bytes=1 << 20, commit_delay=1.0)
    try:
        _episode(writer)
        (warning,) = _behind_warnings(caplog)
        assert "--loader-nice" not in warning, warning
    finally:
        writer.close(10)
        store.close()
