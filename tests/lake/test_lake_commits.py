"""The lake's commits: exactly once across SIGKILLs of the daemon while it commits, two daemons' commits meeting
in one instant both taken, and the lake's tables and views answering with the local store's columns."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
import pytest
from daemon_support import get, post, sql
from lake_rows import scores_table, spans_table
from runs_data import decoded, random_store

from lousho.observe import instrument
from lousho.observe.client.process import start_daemon
from lousho.observe.client.workload import WorkloadPlan, emit_runs
from lousho.observe.errors import LakeFailed, LakeUnavailable
from lousho.observe.lake import lake_schema
from lousho.observe.lake.lake_client import LakeClient, LakeTarget
from lousho.observe.lake.lake_shipper import LakeShipper
from lousho.observe.lake.lake_worker import HOLD_ENV
from lousho.observe.store import schema
from lousho.observe.store.span_store import SpanStore

pytestmark = [pytest.mark.system, pytest.mark.slow]


def _start(tmp_path: Path, lake_url: str, env: dict[str, str] | None = None, every: float = 0.2):
    return start_daemon(tmp_path / "d0" / "observe.duckdb", "--lake", lake_url, "--lake-data",
                        str(tmp_path / "lake-data"), "--lake-name", "d0", "--lake-every", str(every), env=env)


def _lake_count(lake_url: str, data: Path) -> tuple[int, int]:
    with LakeClient(LakeTarget(lake_url, str(data)), read_only=True) as client:
        table, _ = client.query("SELECT count(*) AS n, count(DISTINCT span_key) AS k FROM spans")
    row = table.to_pylist()[0]
    return row["n"], row["k"]


def test_sigkill_while_committing_to_the_lake_loses_and_doubles_nothing(tmp_path, lake_url):
    acked = 0
    # Three rounds: the daemon is killed inside its first lake commit (its rows written, not committed: the spans
    # of this round), restarted, killed just after its first commit (the rows of both rounds committed, the answer
    # never read); then a clean round and stop.
    for round_, fault in enumerate(("lake.committing:1", "lake.committed:1", None)):
        env = {**os.environ, "LOUSHO_OBSERVE_FAULT": fault} if fault else None
        # With a fault the lake commits 3 s after the start: every span below is acked before it.
        daemon = _start(tmp_path, lake_url, env, every=3.0 if fault else 0.2)
        provider = instrument("crash", daemon.url)
        for batch in range(3):
            acked += emit_runs(provider, WorkloadPlan(runs=20, seed=100 * round_ + batch)).spans
            assert provider.force_flush(10_000)
        provider.shutdown()
        if fault:
            deadline = time.monotonic() + 30
            while daemon.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert daemon.process.poll() == -9, f"the fault {fault} was never reached"
            daemon.kill()
        else:
            assert sql(daemon.url, "SELECT count(*) AS n FROM spans") == [{"n": acked}]
            assert daemon.stop() == 0
    # Every acked span once: the local store replayed its spool, the lake took the rest from its position.
    assert _lake_count(lake_url, tmp_path / "lake-data") == (acked, acked)


def test_two_daemons_committing_at_one_instant_both_succeed(tmp_path, lake_url, monkeypatch):
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    with LakeClient(target) as first:
        first.migrate()
    hold = tmp_path / "go"
    monkeypatch.setenv(HOLD_ENV, str(hold))
    clients = [LakeClient(target) for _ in range(2)]
    results: dict[int, int] = {}
    try:
        def commit(i: int) -> None:
            results[i] = clients[i].commit(f"d{i}", 0, 1, {"span_batch": spans_table(i, 1000)})

        threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        # Both transactions have written their rows and wait at their COMMIT: released together.
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("go.*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(list(tmp_path.glob("go.*"))) == 2
        hold.touch()
        for thread in threads:
            thread.join(60)
    finally:
        for client in clients:
            client.close()
    assert results == {0: 1000, 1: 1000}
    monkeypatch.delenv(HOLD_ENV)
    with LakeClient(target, read_only=True) as reader:
        table, _ = reader.query("SELECT daemon, position FROM lousho_lake_positions ORDER BY daemon")
        assert table.to_pylist() == [{"daemon": "d0", "position": 1}, {"daemon": "d1", "position": 1}]
        counted, _ = reader.query("SELECT count(DISTINCT span_key) AS k FROM spans")
        assert counted.to_pylist() == [{"k": 2000}]


def test_the_lake_answers_with_the_local_stores_columns(tmp_path, lake_url):
    con = duckdb.connect(str(tmp_path / "local.duckdb"))
    schema.migrate(con)
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    with LakeClient(target) as writer:
        assert writer.migrate() == lake_schema.LAKE_SCHEMA_VERSION
    with LakeClient(target, read_only=True) as reader:
        for relation in ("spans", "scores", "runs", "sessions"):
            local = con.execute(f"SELECT * FROM {relation} LIMIT 0").description
            lake, _ = reader.query(f"SELECT * FROM {relation} LIMIT 0")
            assert lake.column_names == [c[0] for c in local], relation
    con.close()


def test_a_daemon_whose_lake_is_unreachable_does_not_start_and_says_why(tmp_path):
    with pytest.raises(Exception) as raised:
        start_daemon(tmp_path / "d" / "observe.duckdb", "--lake", "postgresql://postgres:x@127.0.0.1:1/nowhere",
                     "--lake-data", str(tmp_path / "data"), timeout=60)
    assert "LOUSHO_LAKE" in str(raised.value)


def _post_json(url: str, query: str) -> dict:
    return post(url, "/v1/sql", json.dumps({"query": query}).encode(), "application/json").json()


def test_the_upkeep_runs_on_one_daemon_keeps_queries_right_and_moves_when_it_dies(tmp_path, lake_url):
    daemons = [start_daemon(tmp_path / f"u{i}" / "observe.duckdb", "--lake", lake_url, "--lake-data",
                            str(tmp_path / "lake-data"), "--lake-name", f"u{i}", "--lake-every", "0.2",
                            "--lake-upkeep-every", "0.5", "--lake-retention-days", "0") for i in range(2)]
    try:
        sent = 0
        providers = [instrument(f"u{i}", d.url) for i, d in enumerate(daemons)]
        for batch in range(6):  # many small commits: files for the upkeep to merge while it runs
            for i, provider in enumerate(providers):
                sent += emit_runs(provider, WorkloadPlan(runs=5, seed=1000 + 10 * batch + i)).spans
                assert provider.force_flush(10_000)
            time.sleep(0.3)
        for provider in providers:
            provider.shutdown()
        count = "SELECT count(*) AS n, count(DISTINCT span_key) AS k FROM spans"
        deadline = time.monotonic() + 60
        while _lake_rows(daemons[0], count) != [{"n": sent, "k": sent}] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _lake_rows(daemons[0], count) == [{"n": sent, "k": sent}]
        deadline = time.monotonic() + 30
        while max(_metric(d, "lousho_lake_upkeeps_total") for d in daemons) < 3 and time.monotonic() < deadline:
            assert _lake_rows(daemons[1], count) == [{"n": sent, "k": sent}]  # right while the upkeep runs
            time.sleep(0.2)
        runs = [_metric(d, "lousho_lake_upkeeps_total") for d in daemons]
        holders = [_metric(d, "lousho_lake_upkeep_holder") for d in daemons]
        assert sorted(holders) == [0, 1] and sorted(r > 0 for r in runs) == [False, True], (runs, holders)
        holder = holders.index(1)
        daemons[holder].kill()
        other = daemons[1 - holder]
        deadline = time.monotonic() + 15
        while _metric(other, "lousho_lake_upkeeps_total") == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _metric(other, "lousho_lake_upkeep_holder") == 1 and _metric(other, "lousho_lake_upkeeps_total") > 0
        assert _lake_rows(other, count) == [{"n": sent, "k": sent}]
    finally:
        for daemon in daemons:
            if daemon.process.poll() is None:
                assert daemon.stop() == 0


def _lake_rows(daemon, query: str) -> list[dict]:
    reply = post(daemon.url, "/v1/sql?scope=lake", json.dumps({"query": query}).encode(), "application/json")
    assert reply.status == 200, reply.body
    return reply.json()["rows"]


def _metric(daemon, name: str) -> float:
    text = get(daemon.url, "/metrics").body.decode()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def test_the_upkeep_removes_a_span_that_reached_the_lake_from_two_daemons(tmp_path, lake_url):
    """An SDK that re-sent a batch to another daemon of the fleet: the same spans committed by both. The upkeep
    keeps one copy of each (and of its scores); a later upkeep finds nothing more to remove."""
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    with LakeClient(target) as writer:
        writer.migrate()
        shared = spans_table(0, 500)
        received = pa.array([1_000 + i for i in range(500)], pa.int64())
        scores = scores_table(shared)
        assert writer.commit("d0", 0, 1, {"span_batch": shared, "score_batch": scores}) == 500
        later = shared.set_column(shared.schema.get_field_index("received_ns"), "received_ns",
                                  pa.compute.add(received, 5_000))
        resent = {"span_batch": later.slice(0, 200), "score_batch": scores.slice(0, 200)}
        assert writer.commit("d1", 0, 1, resent) == 200
        assert writer.commit("d1", 1, 2, {"span_batch": spans_table(7, 100)}) == 100
        assert writer.upkeep(3600)["duplicates_removed"] == 200
        assert writer.upkeep(3600)["duplicates_removed"] == 0
    with LakeClient(target, read_only=True) as reader:
        table, _ = reader.query("SELECT count(*) AS n, count(DISTINCT span_key) AS k, max(received_ns) AS newest "
                                "FROM spans WHERE span_key >> 64 = 1")
        assert table.to_pylist() == [{"n": 500, "k": 500, "newest": 1_499}]  # the copy received first is kept
        table, _ = reader.query("SELECT count(*) AS n FROM scores")
        assert table.to_pylist() == [{"n": 500}]


def test_a_commit_whose_answer_was_lost_is_not_sent_again_while_the_daemon_lives(tmp_path, lake_url):
    """The lake committed a batch but its answer never came (the lake's process died after COMMIT, a connection
    dropped); the daemon lives on, remembering the old position. Its next round must start from the lake's
    position, not its own, and a batch that starts before the lake's position is refused."""
    store = SpanStore(tmp_path / "observe.duckdb", fold_thread=False)
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    shipper = LakeShipper(target, store.reader, "d0", raise_floor=store.raise_commit_seq)
    try:
        spans, scores = random_store(5, traces=30)
        first, later = spans[: len(spans) // 2], spans[len(spans) // 2:]
        store.append([decoded(first, [])])
        real = LakeClient.commit

        def commit_then_lose(client: LakeClient, *args: object) -> int:
            real(client, *args)  # the lake commits ...
            raise LakeUnavailable("the lake's process stopped")  # ... and the answer never comes

        LakeClient.commit = commit_then_lose  # type: ignore[method-assign]
        try:
            with pytest.raises(LakeUnavailable):
                shipper.ship()
        finally:
            LakeClient.commit = real  # type: ignore[method-assign]
        shipper._failed(LakeUnavailable("lost"))  # what the shipper's loop does with it
        assert shipper.state.position == 0
        store.append([decoded(later, scores)])
        shipper.ship()
        assert _lake_count(lake_url, tmp_path / "lake-data") == (len(spans), len(spans))
        # And the lake itself refuses a batch that starts before its position.
        with LakeClient(target) as client, pytest.raises(LakeFailed, match="read the position again"):
            client.commit("d0", 0, shipper.state.position + 1, {"span_batch": spans_table(9, 10)})
    finally:
        shipper.close(flush_timeout_s=5)
        store.close()
