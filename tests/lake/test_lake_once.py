"""Exactly once across the fleet's edges: one live daemon per lake name, a store keeping the name it shipped under,
the upkeep's de-duplication finding late copies, and a daemon that stops (or dies) without hanging or leaving its
lake process to commit after it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import psycopg
import pyarrow as pa
import pytest
from lake_rows import spans_table
from runs_data import decoded, random_store

from lousho.observe import instrument
from lousho.observe.client.process import start_daemon
from lousho.observe.client.workload import WorkloadPlan, emit_runs
from lousho.observe.errors import LakeNameChanged, LakeNameInUse, LakeUnavailable
from lousho.observe.lake import lake_shipper
from lousho.observe.lake.lake_client import LakeClient, LakeTarget
from lousho.observe.lake.lake_lease import lock_key, name_role
from lousho.observe.lake.lake_shipper import LakeShipper, default_name
from lousho.observe.lake.lake_worker import HOLD_ENV
from lousho.observe.store.span_store import SpanStore

pytestmark = [pytest.mark.system, pytest.mark.slow]


def _lake_count(target: LakeTarget) -> tuple[int, int]:
    with LakeClient(target, read_only=True) as client:
        table, _ = client.query("SELECT count(*) AS n, count(DISTINCT span_key) AS k FROM spans")
    row = table.to_pylist()[0]
    return row["n"], row["k"]


def _spans(seed: int):
    spans, _ = random_store(seed, traces=10)
    return [decoded(spans, [])]


def test_a_second_daemon_with_the_same_lake_name_refuses_until_the_first_is_gone(tmp_path, lake_url):
    """Two stores shipping as one name each took the other's position for their own and skipped rows (a third of
    them never reached the lake, and --local-days then removed them locally). The second refuses to start."""
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    a, b = SpanStore(tmp_path / "a.duckdb", fold_thread=False), SpanStore(tmp_path / "b.duckdb", fold_thread=False)
    first = second = None
    try:
        first = LakeShipper(target, a.reader, "host:/data/observe.duckdb", raise_floor=a.raise_commit_seq)
        a.append(_spans(1))
        first.ship()
        with pytest.raises(LakeNameInUse) as refused:
            LakeShipper(target, b.reader, "host:/data/observe.duckdb", raise_floor=b.raise_commit_seq)
        assert refused.value.code == "LOUSHO_LAKE_NAME_IN_USE" and "--lake-name" in refused.value.hint
        # A daemon says so at start, with the code.
        with pytest.raises(Exception) as daemon:
            start_daemon(tmp_path / "c" / "observe.duckdb", "--lake", lake_url, "--lake-data",
                         str(tmp_path / "lake-data"), "--lake-name", "host:/data/observe.duckdb", timeout=60)
        assert "LOUSHO_LAKE_NAME_IN_USE" in str(daemon.value)
        first.close(flush_timeout_s=5)
        first = None
        second = LakeShipper(target, b.reader, "host:/data/observe.duckdb", raise_floor=b.raise_commit_seq)
    finally:
        for shipper in (first, second):
            if shipper is not None:
                shipper.close(flush_timeout_s=5)
        a.close()
        b.close()


def test_a_daemon_that_lost_its_name_ships_and_prunes_nothing_until_it_holds_it_again(tmp_path, lake_url):
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    store = SpanStore(tmp_path / "a.duckdb", fold_thread=False)
    shipper = LakeShipper(target, store.reader, "d0", raise_floor=store.raise_commit_seq)
    try:
        store.append(_spans(1))
        shipper.ship()
        assert shipper.shipped() == shipper.state.position > 0
        # Another session takes the name the moment this daemon's session ends.
        with psycopg.connect(lake_url, autocommit=True) as other:
            # The timeout: wait until the backend has gone and released its lock (without it this raced the next line).
            other.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_locks WHERE locktype = 'advisory' "
                          "AND ((classid::bigint << 32) | objid::bigint) = %s", [lock_key(name_role("d0"))])
            assert other.execute("SELECT pg_try_advisory_lock(%s)", [lock_key(name_role("d0"))]).fetchone()[0]
            store.append(_spans(2))
            with pytest.raises(LakeUnavailable, match="lost the lake name"):
                shipper.ship()
            assert shipper.shipped() == 0  # the local window keeps everything meanwhile
        # The other session is gone: the name is taken again and shipping goes on from the lake's position.
        shipper.ship()
        assert shipper.shipped() == shipper.state.position
        rows = store.reader().execute("SELECT count(*) FROM span_rows").fetchone()[0]
        assert _lake_count(target) == (rows, rows)
    finally:
        shipper.close(flush_timeout_s=5)
        store.close()


def test_a_store_keeps_the_lake_name_it_shipped_under_when_its_host_is_renamed(tmp_path, lake_url, monkeypatch):
    """A recreated container keeps its volume and gets a new hostname: the default name changes. The store ships
    on under the name it recorded, so the lake holds each span once; a --lake-name that differs is refused."""
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    db = tmp_path / "observe.duckdb"
    store = SpanStore(db, fold_thread=False)
    try:
        monkeypatch.setattr(lake_shipper.socket, "gethostname", lambda: "3f2a9c1d0b7e")
        store.append(_spans(1))
        shipper = LakeShipper(target, store.reader, None, derived=default_name(str(db)),
                              raise_floor=store.raise_commit_seq)
        shipper.ship()
        shipper.close(flush_timeout_s=5)
        monkeypatch.setattr(lake_shipper.socket, "gethostname", lambda: "8be41d77c0aa")
        shipper = LakeShipper(target, store.reader, None, derived=default_name(str(db)),
                              raise_floor=store.raise_commit_seq)
        assert shipper.name == f"3f2a9c1d0b7e:{db}"
        store.append(_spans(2))
        shipper.ship()
        shipper.close(flush_timeout_s=5)
        rows = store.reader().execute("SELECT count(*) FROM span_rows").fetchone()[0]
        assert _lake_count(target) == (rows, rows)
        with pytest.raises(LakeNameChanged) as refused:
            LakeShipper(target, store.reader, "d9", raise_floor=store.raise_commit_seq)
        assert "3f2a9c1d0b7e" in refused.value.hint and "d9" in refused.value.hint
    finally:
        store.close()


def test_a_store_that_never_reached_the_lake_may_take_another_name(tmp_path, lake_url):
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    store = SpanStore(tmp_path / "observe.duckdb", fold_thread=False)
    try:
        LakeShipper(target, store.reader, "first", raise_floor=store.raise_commit_seq).close(flush_timeout_s=0)
        shipper = LakeShipper(target, store.reader, "second", raise_floor=store.raise_commit_seq)
        shipper.close(flush_timeout_s=0)
        shipper = LakeShipper(target, store.reader, None, raise_floor=store.raise_commit_seq)
        assert shipper.name == "second"
        shipper.close(flush_timeout_s=0)
    finally:
        store.close()


def _received(table: pa.Table, ns: int) -> pa.Table:
    return table.set_column(table.schema.get_field_index("received_ns"), "received_ns",
                            pa.array([ns] * table.num_rows, pa.int64()))


def test_the_upkeep_removes_a_late_copy_committed_after_its_last_run(tmp_path, lake_url):
    """A daemon whose lake was down for an hour commits spans it received an hour ago, after an upkeep ran; another
    daemon had committed the SDK's re-send of them. The next upkeep finds them: it looks by the lake's commit
    order, not by when a daemon received the spans."""
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    now, hour = time.time_ns(), 3600 * 10**9
    with LakeClient(target) as writer:
        writer.migrate()
        writer.commit("d0", 0, 1, {"span_batch": _received(spans_table(0, 10), now - hour)})
        writer.commit("d0", 1, 2, {"span_batch": _received(spans_table(5, 10), now)})
        assert writer.upkeep(7 * 86_400)["duplicates_removed"] == 0
        writer.commit("d1", 0, 1, {"span_batch": _received(spans_table(0, 10), now - hour + 1)})
        assert writer.upkeep(7 * 86_400)["duplicates_removed"] == 10
        assert writer.upkeep(7 * 86_400)["duplicates_removed"] == 0
    assert _lake_count(target) == (20, 20)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie nobody reaped has ended


def _wait(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_lake_process_of_a_killed_daemon_dies_before_it_commits(tmp_path, lake_url):
    """A daemon SIGKILLed while its lake process commits: the orphan must not finish that commit after a restarted
    daemon read the position (the batch would be in the lake twice). It exits within a second of its daemon."""
    hold = tmp_path / "go"
    daemon = start_daemon(tmp_path / "d0" / "observe.duckdb", "--lake", lake_url, "--lake-data",
                          str(tmp_path / "lake-data"), "--lake-name", "d0", "--lake-every", "0.2",
                          env={**os.environ, HOLD_ENV: str(hold)})
    try:
        provider = instrument("orphan", daemon.url)
        emit_runs(provider, WorkloadPlan(runs=5, seed=3))
        assert provider.force_flush(10_000)
        provider.shutdown()
        # The lake process has written the batch and waits at its COMMIT.
        assert _wait(lambda: list(tmp_path.glob("go.*")), 30)
        worker = int(next(tmp_path.glob("go.*")).suffix[1:])
        assert _alive(worker)
        daemon.process.kill()  # not daemon.kill(): it waits for the output pipe, which an orphan would hold open
        daemon.process.wait(30)
        assert _wait(lambda: not _alive(worker), 1.0), "the lake process outlived its daemon"
        hold.touch()  # an orphan still waiting would commit now
        time.sleep(1)
        with LakeClient(LakeTarget(lake_url, str(tmp_path / "lake-data")), read_only=True) as client:
            table, _ = client.query("SELECT count(*) AS n FROM lousho_lake_positions")
        assert table.to_pylist() == [{"n": 0}]
    finally:
        hold.touch()
        daemon.kill()


def _postgres_processes(server) -> list[int]:
    postmaster = int((server.datadir / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(postmaster)], capture_output=True, text=True)
    return [postmaster, *(int(p) for p in children.stdout.split())]


def test_a_daemon_whose_lake_froze_still_stops_in_bounded_time_with_its_store_closed(tmp_path, lake_url,
                                                                                     pg_lake_server):
    """Postgres stops answering (SIGSTOP: connections stay open, nothing comes back) while the daemon commits to the
    lake: SIGTERM still ends it within 20 s, its store checkpointed and closed; the rows the lake never got ship at
    the next start, once."""
    db = tmp_path / "d0" / "observe.duckdb"
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    daemon = start_daemon(db, "--lake", lake_url, "--lake-data", target.data_path, "--lake-name", "d0",
                          "--lake-every", "0.2")
    frozen: list[int] = []
    try:
        provider = instrument("frozen", daemon.url)
        acked = emit_runs(provider, WorkloadPlan(runs=5, seed=1)).spans
        assert provider.force_flush(10_000)
        assert _wait(lambda: _lake_count(target) == (acked, acked), 30)
        frozen = _postgres_processes(pg_lake_server)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        acked += emit_runs(provider, WorkloadPlan(runs=5, seed=2)).spans
        assert provider.force_flush(10_000)
        provider.shutdown()
        time.sleep(1)  # the shipper's commit now waits on the frozen catalog
        started = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        try:
            code = daemon.process.wait(20)
        except subprocess.TimeoutExpired:
            pytest.fail("the daemon did not stop within 20 s of SIGTERM with its lake frozen")
        assert code == 0, "\n".join(daemon.output[-30:])
        assert time.monotonic() - started < 20
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        daemon.kill()
    store = SpanStore(db, fold_thread=False)  # closed cleanly: it opens, with every acked span
    try:
        assert store.reader().execute("SELECT count(*) FROM span_rows").fetchone()[0] == acked
        shipper = LakeShipper(target, store.reader, None, raise_floor=store.raise_commit_seq)
        assert shipper.name == "d0"
        shipper.ship()
        shipper.close(flush_timeout_s=5)
    finally:
        store.close()
    assert _lake_count(target) == (acked, acked)


def test_a_local_store_error_at_close_does_not_escape_the_shipper(tmp_path, lake_url):
    store = SpanStore(tmp_path / "observe.duckdb", fold_thread=False)
    try:
        shipper = LakeShipper(LakeTarget(lake_url, str(tmp_path / "lake-data")), store.reader, "d0",
                              raise_floor=store.raise_commit_seq)

        def broken() -> None:
            raise duckdb.IOException("the local store's disk went away")

        shipper._next_batch = broken  # type: ignore[method-assign]
        started = time.monotonic()
        shipper.close(flush_timeout_s=5)  # logged, not raised: the daemon's cleanup goes on to close the store
        assert time.monotonic() - started < 5
    finally:
        store.close()
