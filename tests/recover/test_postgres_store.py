"""What only the Postgres store has to get right: processes racing on one row, row locks held by others, opening an
empty database, a collation that is not bytewise, and connections the server drops.

The conformance suite (every test taking ``store_url``) already runs on Postgres; these add what SQLite's single
write lock makes impossible to get wrong. Racers are separate processes with their own connections, and hold
their transaction open at the ``before_commit`` fault point, so that they overlap on purpose.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from pg_support import PgServer
from recover_support import RACE_CHILD, raw_sql, spawned, table_names

from lousho.recover import durable, schema
from lousho.recover.cli import pending
from lousho.recover.errors import RunAwaitingApproval, StoreBusy, StoreMissing, StoreUnavailable
from lousho.recover.store import RunStore
from lousho.recover.store import open as open_store
from lousho.recover.store_postgres import PostgresStore

pytestmark = pytest.mark.system  # a real server and child processes

ERROR = {"message": "provider said 503", "code": "LOUSHO_PROVIDER_UNAVAILABLE", "category": "unknown",
         "retryable": True}


def race(url: str, tmp_path: Path, *commands: tuple[str, ...]) -> list[dict[str, Any]]:
    """Run race_child.py commands at once: each opens its store and says "ready", then all start together."""
    go = Path(tempfile.mkdtemp(dir=tmp_path)) / "go"  # a new one per race: an old one would start it early
    results = []
    with spawned(*[(command[0], url, str(go), *command[1:]) for command in commands], child=RACE_CHILD) as children:
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline().strip()
            assert line == "ready", (line, child.stderr.read() if child.stderr else "")
        go.touch()
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            results.append(json.loads(out.splitlines()[-1]))
    return results


# --- races between processes ---


def test_two_processes_racing_to_resolve_each_approval_decide_it_once_and_the_winner_decision_stands(
    pg_url: str, tmp_path: Path,
):
    store = open_store(pg_url)
    store.create_run("r1", agent="a", kind="send", input={})
    ids = [store.create_approval("r1", tool_call_id=f"c{i}", tool_name="rm", args={"i": i}).id for i in range(30)]
    approver, denier = race(pg_url, tmp_path, ("resolve", "approve", *ids, "--hold", "0.002"),
                            ("resolve", "deny", *ids, "--hold", "0.002"))
    assert not set(approver["won"]) & set(denier["won"])
    assert sorted(approver["won"] + denier["won"]) == sorted(ids)
    decided = {a.id: a.status for a in store.list_approvals("r1")}
    assert decided == {**dict.fromkeys(approver["won"], "approved"), **dict.fromkeys(denier["won"], "denied")}
    store.close()


def test_fenced_saves_racing_a_bump_commit_before_the_bump_or_not_at_all(pg_url: str, tmp_path: Path):
    """Two processes save steps of one run at epoch 0, each holding its transaction open 3 ms; a third bumps the
    epoch mid-way. Every save acknowledged is recorded and committed before the bump (server commit timestamps);
    every save after it is refused with LeaseLost and left nothing; the history ring numbered each save once."""
    store = open_store(pg_url)
    store.create_run("r1", agent="a", kind="send", input={})
    even, odd, bump = race(pg_url, tmp_path, ("save", "r1", "0", "2", "--hold", "0.003"),
                           ("save", "r1", "1", "2", "--hold", "0.003"), ("bump", "r1", "20"))
    assert bump == {"epoch": 1}
    for saver in (even, odd):
        assert saver["lost"] == {"epoch": 0, "current": 1}
        assert all(epoch == 0 for _, epoch in saver["saved"])
    acknowledged = sorted(step for saver in (even, odd) for step, _ in saver["saved"])
    steps = store.load_steps("r1")
    assert sorted(steps) == acknowledged and len(acknowledged) >= 20
    assert {record.epoch for record in steps.values()} == {0}
    (last_step_commit, bump_commit), = raw_sql(
        pg_url, "SELECT (SELECT MAX(pg_xact_commit_timestamp(xmin)) FROM checkpoints WHERE run_id = ?), "
                "pg_xact_commit_timestamp(xmin) FROM runs WHERE id = ?", ("r1", "r1"))
    assert last_step_commit <= bump_commit
    seqs = sorted(row[0] for row in raw_sql(pg_url, "SELECT seq FROM checkpoint_history WHERE run_id = ?", ("r1",)))
    count = len(acknowledged)
    assert seqs == list(range(max(1, count - store.history_limit + 1), count + 1))
    store.close()


def test_processes_creating_one_run_id_at_once_create_it_once(pg_url: str, tmp_path: Path):
    tags = [f"racer-{i}" for i in range(4)]
    results = race(pg_url, tmp_path, *[("create", "r1", tag, "--hold", "0.05") for tag in tags])
    winners = [tag for tag, result in zip(tags, results, strict=True) if result["won"]]
    assert len(winners) == 1
    store = open_store(pg_url)
    assert store.get_run("r1").input == winners[0] and [r.id for r in store.list_runs()] == ["r1"]
    store.close()


def test_processes_claiming_one_run_at_once_claim_it_once(pg_url: str, tmp_path: Path):
    store = open_store(pg_url)
    store.create_run("r1", agent="a", kind="send", input={}, status="interrupted")
    owners = [f"replica-{i}" for i in range(3)]
    results = race(pg_url, tmp_path, *[("claim", "r1", owner, "--hold", "0.05") for owner in owners])
    winners = [owner for owner, result in zip(owners, results, strict=True) if result["epoch"] is not None]
    assert len(winners) == 1 and sorted(r["epoch"] or 0 for r in results) == [0, 0, 1]
    run = store.get_run("r1")
    assert (run.lease_owner, run.lease_epoch) == (winners[0], 1)
    store.close()


def test_replicas_counting_failures_at_once_open_the_outage_breaker_once_and_reserve_one_probe(
    pg_url: str, tmp_path: Path,
):
    store = open_store(pg_url)
    now = datetime.now(UTC)
    for _ in range(2):
        store.record_outcome(provider_failure=True, now=now, threshold=3, first_probe_at=now - timedelta(seconds=1))
    results = race(pg_url, tmp_path, *[("outcome", "3", "--hold", "0.05")] * 3)
    assert sorted(str(r["change"]) for r in results) == ["None", "None", "opened"]
    assert store.get_outage().failures == 5 and store.get_outage().paused
    raw_sql(pg_url, "UPDATE recover_outage SET next_probe_at = ?", ("2000-01-01T00:00:00.000000Z",))  # probe due
    results = race(pg_url, tmp_path, *[("probe", f"replica-{i}", "--hold", "0.05") for i in range(3)])
    assert sorted(r["reserved"] for r in results) == [False, False, True]
    store.close()


def _waits_on_a_lock(admin: psycopg.Connection[Any], pid: int) -> bool:
    row = admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] == "Lock"


def test_a_replica_that_read_the_breaker_makes_the_next_wait_so_the_failure_reaching_the_threshold_opens_it_once(
    pg_url: str,
):
    """record_outcome reads the breaker, then decides what to write. The first replica stops right after its read,
    its transaction open, until the second replica has either queued on the breaker row's lock (FOR UPDATE: it then
    reads the count the first commits, and only counts its failure) or read the row itself (no lock: both read one
    failure, below the threshold of 2, and both report "opened")."""
    now = datetime.now(UTC)
    with contextlib.closing(open_store(pg_url)) as setup:
        setup.record_outcome(provider_failure=True, now=now, threshold=2, first_probe_at=now)
        first_change, second_change = _count_a_failure_each_with_the_first_held_after_its_read(pg_url, now)
        assert sorted([str(first_change), str(second_change)]) == ["None", "opened"]
        assert first_change == "opened"  # the one that read first opened it; the other counted after it committed
        state = setup.get_outage()
        assert state.paused and state.failures == 3


def _count_a_failure_each_with_the_first_held_after_its_read(pg_url: str, now: datetime) -> tuple[Any, Any]:
    """Two replicas each count one provider failure (threshold 2); the first holds its transaction open after
    reading the breaker until the second has read it too or waits for its row lock. Returns both changes."""
    second_read = threading.Event()
    second = PostgresStore(pg_url, fault=lambda point: point == "record_outcome:read" and second_read.set())
    second_pid = second._db._conn.info.backend_pid
    inside, first_outcome = threading.Event(), []

    def hold_after_read(point: str) -> None:
        if point != "record_outcome:read":
            return
        inside.set()
        deadline = time.monotonic() + 10
        with psycopg.connect(pg_url, autocommit=True) as admin:
            while not (second_read.is_set() or _waits_on_a_lock(admin, second_pid)):
                if time.monotonic() > deadline:
                    raise AssertionError("the second replica neither read the breaker nor waited for its lock")
                time.sleep(0.002)

    first = PostgresStore(pg_url, fault=hold_after_read)

    def count_first() -> None:
        try:
            first_outcome.append(first.record_outcome(provider_failure=True, now=now, threshold=2,
                                                      first_probe_at=now)[1])
        except BaseException as e:  # handed to the test, which raises it
            first_outcome.append(e)

    thread = threading.Thread(target=count_first)
    thread.start()
    try:
        assert inside.wait(10)
        _, second_change = second.record_outcome(provider_failure=True, now=now, threshold=2, first_probe_at=now)
    finally:
        thread.join(30)
        first.close()
        second.close()
    if isinstance(first_outcome[0], BaseException):
        raise first_outcome[0]
    return first_outcome[0], second_change


def test_processes_opening_an_empty_database_at_once_migrate_it_once(pg_url: str, tmp_path: Path):
    assert race(pg_url, tmp_path, *[("open",)] * 3) == [{"opened": True}] * 3
    versions = [row[0] for row in raw_sql(pg_url, "SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == list(range(1, schema.LATEST + 1))


def _hold_in_thread(store_url: str, point: str, call: Callable[[RunStore], Any]) -> tuple[threading.Thread, list]:
    """Start ``call`` on its own store in a thread; it holds its transaction open at ``point`` for 0.3 s. Returns
    once the transaction is inside the hold (so its row locks are taken), with the thread and its outcome list."""
    inside, outcome = threading.Event(), []

    def fault(name: str) -> None:
        if name == point:
            inside.set()
            time.sleep(0.3)

    holder = open_store(store_url, fault=fault)

    def run() -> None:
        try:
            outcome.append(call(holder))
        except BaseException as e:  # handed to the test, which asserts on it
            outcome.append(e)
        finally:
            holder.close()

    thread = threading.Thread(target=run)
    thread.start()
    assert inside.wait(10)
    return thread, outcome


def test_a_resume_that_waited_on_a_pausing_writer_sees_its_approval_and_refuses(pg_url: str):
    """begin_attempt blocked on the row of a run being paused must see the approval committed with the pause
    (READ COMMITTED would otherwise re-check the run row but not the approval subquery)."""
    store = open_store(pg_url)
    store.create_run("r1", agent="a", kind="send", input={})
    thread, outcome = _hold_in_thread(pg_url, "create_approval:before_commit", lambda other: other.create_approval(
        "r1", tool_call_id="c", tool_name="rm", args={}, approval_id="apr-1", pause_epoch=0))
    with pytest.raises(RunAwaitingApproval) as info:
        store.begin_attempt("r1")  # waits for the pause to commit
    thread.join()
    assert outcome[0].id == "apr-1" and info.value.approval_ids == ["apr-1"]
    run = store.get_run("r1")
    assert (run.status, run.lease_epoch, run.attempts) == ("awaiting_approval", 0, 0)
    store.close()


def test_deleting_a_run_while_a_step_is_being_saved_removes_the_step_too(pg_url: str):
    store = open_store(pg_url)
    store.create_run("r1", agent="a", kind="send", input={})
    thread, outcome = _hold_in_thread(pg_url, "save_step:before_commit",
                                      lambda other: other.save_step("r1", 0, "s", "out", epoch=0))
    assert store.delete_run("r1") is True  # waits for the save, then deletes it with the run: no foreign-key error
    thread.join()
    assert outcome[0].step == 0
    assert store.get_run("r1") is None and store.load_steps("r1") == {} and store.history("r1") == []
    store.close()


# --- locks, missing tables, collation ---


def test_a_row_lock_held_past_the_busy_timeout_is_a_retryable_store_busy(pg_url: str):
    store = PostgresStore(pg_url, busy_timeout_s=0.2)
    store.create_run("r1", agent="a", kind="send", input={})
    with psycopg.connect(pg_url) as other:  # another process, stuck inside a transaction that locked the run
        other.execute("SELECT 1 FROM runs WHERE id = 'r1' FOR UPDATE")
        started = time.monotonic()
        with pytest.raises(StoreBusy) as info:
            store.record_failure("r1", ERROR)
        assert time.monotonic() - started >= 0.2
        assert info.value.retryable and store.location in info.value.hint
        other.rollback()
    assert store.record_failure("r1", ERROR).attempts == 1  # nothing was left half-done, and once only
    store.close()


def test_opening_without_create_finds_no_store_in_an_empty_database_and_creates_nothing(pg_url: str):
    with pytest.raises(StoreMissing) as info:
        open_store(pg_url, create=False)
    assert "***" in info.value.path
    with pytest.raises(StoreMissing):
        CliRunner().invoke(pending, ["--store", pg_url], catch_exceptions=False)
    assert table_names(pg_url) == set()


def test_ids_sort_bytewise_as_in_sqlite_even_where_the_database_collation_does_not(pg_server: PgServer):
    ids = ["b", "a1", "A1", "a-2", "a.1", "a_3", "a 4"]
    with pg_server.fresh_database("LOCALE_PROVIDER icu ICU_LOCALE 'en-US'") as url:
        natural = [row[0] for row in raw_sql(url, f"SELECT * FROM (VALUES {', '.join(['(?)'] * len(ids))}) AS v "
                                                  "ORDER BY 1", tuple(ids))]
        assert natural != sorted(ids)  # the database's own order is not bytewise: the test can tell
        store = open_store(url)
        try:
            for run_id in ids:
                store.create_run(run_id, agent="a", kind="send", input={})
            raw_sql(url, "UPDATE runs SET created_at = '2026-01-01T00:00:00.000000Z'")  # order by id alone
            assert [r.id for r in store.list_runs()] == sorted(ids)
        finally:
            store.close()


# --- connections the server drops ---


def test_a_wrong_password_or_a_missing_database_is_unavailable_and_not_retryable(pg_server: PgServer):
    for url in (pg_server.url().replace(pg_server.password, "wrong-pw"), pg_server.url("no_such_db")):
        with pytest.raises(StoreUnavailable) as info:
            open_store(url)
        err = info.value
        assert not err.retryable and ("password" in err.reason or "does not exist" in err.reason)
        assert "wrong-pw" not in err.message + err.hint and pg_server.password not in err.message


def _terminate(pg_server: PgServer, pid: int) -> None:
    with pg_server.admin() as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)


def test_a_connection_dropped_between_calls_is_replaced_and_the_write_is_applied_once(
    pg_url: str, pg_server: PgServer,
):
    store = PostgresStore(pg_url)
    assert "***" in store.location and pg_server.password not in store.location
    store.create_run("r1", agent="a", kind="send", input={})
    _terminate(pg_server, store._db._conn.info.backend_pid)  # an admin, a pooler or a failover kills it
    assert store.record_failure("r1", ERROR).attempts == 1
    _terminate(pg_server, store._db._conn.info.backend_pid)
    assert store.get_run("r1").attempts == 1
    store.close()


def test_a_connection_lost_during_commit_is_store_unavailable_and_is_not_retried(pg_url: str, pg_server: PgServer):
    """The store cannot know whether a COMMIT it lost committed, and record_failure is not idempotent: it says so
    (retryable) instead of applying the write a second time."""
    store: PostgresStore

    def drop_at_commit(point: str) -> None:
        if point == "record_failure:before_commit":
            _terminate(pg_server, store._db._conn.info.backend_pid)

    store = PostgresStore(pg_url, fault=drop_at_commit)
    store.create_run("r1", agent="a", kind="send", input={})
    with pytest.raises(StoreUnavailable) as info:
        store.record_failure("r1", ERROR)
    assert info.value.retryable and "may or may not have committed" in info.value.message
    assert store.get_run("r1").attempts == 0  # here it had not: the server rolled the transaction back
    store.close()


def test_durable_runs_survive_a_dropped_connection_mid_run(pg_url: str, pg_server: PgServer):
    store = PostgresStore(pg_url)
    run = durable.start(store, "r1", "a", "send", {})
    run.step("a", lambda: 1)
    _terminate(pg_server, store._db._conn.info.backend_pid)
    assert run.step("b", lambda: 2) == 2
    run.finish("done")
    assert sorted(store.load_steps("r1")) == [0, 1] and store.get_run("r1").status == "finished"
    store.close()


def test_a_success_with_the_breaker_closed_leaves_its_row_alone_so_replicas_do_not_queue_on_it(pg_url: str):
    """Every resume counts its outcome into the one breaker row; a success that changes nothing must not lock that
    row, or every replica's every run would wait on it in turn. A failure still takes the lock (StoreBusy here)."""
    store = PostgresStore(pg_url, busy_timeout_s=0.5)
    now = datetime.now(UTC)
    with psycopg.connect(pg_url) as holder:  # another replica's open transaction on the breaker row
        holder.execute("SELECT 1 FROM recover_outage WHERE id = 'provider' FOR UPDATE")
        state, change = store.record_outcome(provider_failure=False, now=now, threshold=3, first_probe_at=now)
        assert (state.failures, state.paused, change) == (0, False, None)
        with pytest.raises(StoreBusy):
            store.record_outcome(provider_failure=True, now=now, threshold=3, first_probe_at=now)
    store.close()


def test_an_update_that_loses_its_connection_is_applied_by_its_retry_as_it_sets_values(
    pg_url: str, pg_server: PgServer,
):
    """update_run sets values (a finish, a lease renewal, a release), so it is one statement in its own transaction,
    one round trip, and a connection lost under it is simply retried: applying it twice leaves what once does.
    record_failure counts, so it stays a transaction whose lost COMMIT is reported, not retried."""
    store: PostgresStore

    def drop(point: str) -> None:
        if point == "update_run:before_commit" and not dropped:
            dropped.append(point)
            _terminate(pg_server, store._db._conn.info.backend_pid)

    dropped: list[str] = []
    store = PostgresStore(pg_url, fault=drop)
    store.create_run("r1", agent="a", kind="send", input={})
    finished = store.update_run("r1", epoch=0, status="finished", output={"ok": True})
    assert (finished.status, finished.output) == ("finished", {"ok": True}) and dropped
    assert store.get_run("r1").status == "finished"
    store.close()
