"""Acks first: the daemon's loader, its fold and DuckDB's workers run below the request path's priority (Linux
nice), so a burst's acks are not slowed to the loader's pace; ``--loader-nice 0`` keeps them level. The
throughput this buys is measured by benchmarks/perf/ingest.py, not here."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from daemon_support import post, sql
from otlp_bodies import chat_span, new_ids, request

from lousho.kernel import cpu_priority
from lousho.observe.client.process import start_daemon

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priority is Linux's")


def _nice_by_thread(pid: int) -> dict[int, int]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except FileNotFoundError:
            continue  # the thread ended while listed
        out[int(tid)] = int(stat.rsplit(")", 1)[1].split()[16])  # field 19: nice
    return out


def _lowered_after_one_span(db: Path, *args: str) -> tuple[int, dict[int, int]]:
    """The daemon's threads at the background priority once it has acked one span (before any SQL query: the
    SQL workers lower themselves, and the threads they start inherit it)."""
    daemon = start_daemon(db, *args)
    try:
        trace, span = new_ids()
        body = request([chat_span(trace, span)]).SerializeToString()
        assert post(daemon.url, "/v1/traces", body, "application/x-protobuf").status == 200
        nice = _nice_by_thread(daemon.pid)
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans")[0]["n"] == 1
        assert nice[daemon.pid] == 0, "the request path (the main thread) must keep its priority"
        return sum(value > 0 for value in nice.values()), nice
    finally:
        daemon.stop()


def test_the_loader_and_duckdb_run_below_the_request_path(tmp_path: Path) -> None:
    lowered, nice = _lowered_after_one_span(tmp_path / "a.duckdb")
    level, level_nice = _lowered_after_one_span(tmp_path / "b.duckdb", "--loader-nice", "0")
    assert level == 0, level_nice
    # The loader and DuckDB's workers (at least one per core) at the background step, the fold below them.
    values = list(nice.values())
    assert values.count(cpu_priority.BACKGROUND_NICE) >= 2, nice
    assert values.count(cpu_priority.BACKGROUND_NICE + cpu_priority.FOLD_EXTRA_NICE) == 1, nice
    assert lowered >= 3, nice


def test_threads_started_in_a_lowered_thread_inherit_its_priority() -> None:
    seen: list[int] = []

    def start_child() -> int:
        child = threading.Thread(target=lambda: seen.append(cpu_priority.thread_priority(threading.get_native_id())))
        child.start()
        child.join()
        return cpu_priority.thread_priority(threading.get_native_id())

    base = cpu_priority.thread_priority(threading.get_native_id())
    assert cpu_priority.in_lowered_thread(3, start_child) == min(base + 3, 19)
    assert seen == [min(base + 3, 19)]
    assert cpu_priority.thread_priority(threading.get_native_id()) == base  # the caller is untouched


def test_a_failure_in_the_lowered_thread_is_raised_to_the_caller() -> None:
    def fail() -> None:
        raise ValueError("no such store")

    with pytest.raises(ValueError, match="no such store"):
        cpu_priority.in_lowered_thread(2, fail)


def test_the_fold_goes_below_the_loader_and_level_stays_level() -> None:
    assert cpu_priority.fold_nice(10) == 15
    assert cpu_priority.fold_nice(17) == 19
    assert cpu_priority.fold_nice(0) == 0
