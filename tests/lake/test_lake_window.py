"""The local store's window in a fleet (``--local-days``): old traces leave the store only once the lake holds
them, whole, with their scores and runs; the lake keeps everything."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from daemon_support import get, post, sql
from runs_data import decoded, random_store

from lousho.observe import instrument
from lousho.observe.client.process import start_daemon
from lousho.observe.client.workload import WorkloadPlan, emit_runs
from lousho.observe.store.span_store import SpanStore

pytestmark = [pytest.mark.system, pytest.mark.slow]


def test_old_traces_leave_the_store_once_the_lake_holds_them(tmp_path, lake_url):
    # A window of about a tenth of a second, looked at every 0.3 s: every trace is old by the next look.
    daemon = start_daemon(tmp_path / "d0" / "observe.duckdb", "--lake", lake_url, "--lake-data",
                          str(tmp_path / "lake-data"), "--lake-name", "d0", "--lake-every", "0.2",
                          "--local-days", "0.000001", "--local-prune-every", "0.3")
    try:
        provider = instrument("window", daemon.url)
        sent = emit_runs(provider, WorkloadPlan(runs=40, seed=5)).spans
        assert provider.force_flush()
        provider.shutdown()
        deadline = time.monotonic() + 60
        while sql(daemon.url, "SELECT count(*) AS n FROM spans") != [{"n": 0}] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": 0}]
        assert sql(daemon.url, "SELECT count(*) AS n FROM runs") == [{"n": 0}]
        assert sql(daemon.url, "SELECT count(*) AS n FROM scores") == [{"n": 0}]
        lake = post(daemon.url, "/v1/sql?scope=lake", b'{"query": "SELECT count(*) AS n FROM spans"}',
                    "application/json").json()["rows"]
        assert lake == [{"n": sent}]
        lake_runs = post(daemon.url, "/v1/sql?scope=lake", b'{"query": "SELECT count(*) AS n FROM runs"}',
                         "application/json").json()["rows"]
        assert lake_runs == [{"n": 40}]
        metrics = get(daemon.url, "/metrics").body.decode()
        assert f"lousho_spans_pruned_total {sent}" in metrics
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


def test_a_trace_the_lake_does_not_hold_stays_however_old(tmp_path):
    store = SpanStore(tmp_path / "observe.duckdb", fold_thread=False)
    try:
        spans, scores = random_store(3, traces=20)
        stored = store.append([decoded(spans, scores)]).inserted
        con = store.reader()
        newest = con.execute("SELECT max(commit_seq) FROM span_rows").fetchone()[0]
        runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
        future = time.time_ns() + 10**12
        assert store.prune(future, shipped=newest - 1) == 0  # the lake does not hold this commit: nothing leaves
        assert store.prune(0, shipped=newest) == 0  # nothing ended before the cutoff
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == runs > 0
        assert store.prune(future, shipped=newest) == stored
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM scores").fetchone()[0] == 0
        con.close()
    finally:
        store.close()


def test_local_days_without_a_lake_is_refused(tmp_path):
    out = subprocess.run([sys.executable, "-m", "lousho", "observe", "--db", str(tmp_path / "o.duckdb"),
                          "--local-days", "7"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "LOUSHO_LAKE_INCOMPLETE" in out.stderr, out.stderr


def test_a_lake_password_on_the_command_line_is_warned_about(tmp_path):
    out = subprocess.run([sys.executable, "-m", "lousho", "sql", "--lake", "postgresql://u:secret@127.0.0.1:1/x",
                          "--lake-data", str(tmp_path / "d"), "SELECT 1"], capture_output=True, text=True, timeout=60)
    assert "warning: the password in --lake is visible" in out.stderr
    assert out.returncode != 0 and "LOUSHO_LAKE_UNAVAILABLE" in out.stderr and "secret" not in out.stderr


def test_a_lake_query_right_after_an_ack_sees_the_acked_spans(tmp_path, lake_url):
    """Read your acks on the lake: with commits to the lake a minute apart, a ``scope=lake`` query sent right after
    the ack still sees the spans, because the query waits until this daemon's store is in the lake."""
    daemon = start_daemon(tmp_path / "d0" / "observe.duckdb", "--lake", lake_url, "--lake-data",
                          str(tmp_path / "lake-data"), "--lake-name", "d0", "--lake-every", "60")
    try:
        for seed in range(2):
            provider = instrument("acks", daemon.url)
            emit_runs(provider, WorkloadPlan(runs=10, seed=seed))
            assert provider.force_flush()
            provider.shutdown()
            reply = post(daemon.url, "/v1/sql?scope=lake", b'{"query": "SELECT count(*) AS n FROM spans"}',
                         "application/json")
            assert reply.status == 200
            assert reply.json()["rows"] == sql(daemon.url, "SELECT count(*) AS n FROM spans") != [{"n": 0}]
            assert reply.headers["x-lousho-lag-ms"] == "0"
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])
