"""Run leases: the claim's compare-and-set, expiry, heartbeats, fencing of a stale runner, and many loops on one
store (recovery-anchors §9.1, §9.10.2). The store claims run against every backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from recover_support import raw_sql
from test_loop_support import FakeClock, ScriptedApp, interrupted_run

from lousho.recover import durable, lease
from lousho.recover.errors import CheckpointCorrupt, LeaseLost, RunExists
from lousho.recover.loop import RecoverSettings, RecoveryLoop
from lousho.recover.store import RunStore

T0 = datetime(2030, 1, 1, tzinfo=UTC)  # later than any real created_at/updated_at a test writes


def claim(store: RunStore, run_id: str, owner: str, now: datetime, *, orphan_s: float = 900.0, due_only: bool = True,
          seconds: float = 60.0):
    return store.claim_run(run_id, owner=owner, lease_seconds=seconds, now=now,
                           orphan_before=now - timedelta(seconds=orphan_s), due_only=due_only)


# --- the claim, in the store ---


def test_a_claim_takes_the_lease_bumps_the_epoch_and_fences_the_previous_writer(store: RunStore):
    run = durable.start(store, "r1", "coder", "send", {})
    run.step("a", lambda: 1)
    run.fail(ConnectionError("reset"))
    claimed = claim(store, "r1", "loop-a", T0)
    assert (claimed.lease_owner, claimed.lease_epoch, claimed.status) == ("loop-a", 1, "interrupted")
    assert claimed.lease_expiry == "2030-01-01T00:01:00.000000Z"
    with pytest.raises(LeaseLost):
        store.save_step("r1", 1, "b", 2, epoch=0)  # the writer before the claim is refused


def test_a_live_lease_is_not_claimable_and_an_expired_one_is(store: RunStore):
    interrupted_run(store, "r1")
    assert claim(store, "r1", "loop-a", T0).lease_epoch == 1
    assert claim(store, "r1", "loop-b", T0 + timedelta(seconds=59)) is None
    assert claim(store, "r1", "loop-a", T0 + timedelta(seconds=30)) is None  # not even by its own holder
    taken = claim(store, "r1", "loop-b", T0 + timedelta(seconds=60))  # expiry <= now: free
    assert (taken.lease_owner, taken.lease_epoch) == ("loop-b", 2)


def test_a_claim_rechecks_the_due_time_so_a_stale_listing_cannot_resume_a_run_early(store: RunStore):
    interrupted_run(store, "r1")
    assert store.list_due(now=T0, orphan_before=T0) == ["r1"]
    store.update_run("r1", next_attempt_at=T0 + timedelta(minutes=5))  # another replica backed it off
    assert claim(store, "r1", "loop-a", T0) is None
    assert store.list_due(now=T0, orphan_before=T0) == []
    assert claim(store, "r1", "loop-a", T0, due_only=False).lease_owner == "loop-a"  # only the time is waived


def test_only_pending_runs_are_ever_listed_or_claimed(store: RunStore):
    durable.start(store, "done", "a", "send", {}).finish("ok")
    durable.start(store, "stopped", "a", "send", {}).stop("no progress")
    interrupted_run(store, "quarantined")
    store.update_run("quarantined", status="quarantined")
    durable.start(store, "failed", "a", "send", {}).fail(RunExists("x", "y"))  # not retryable
    durable.start(store, "waiting", "a", "send", {}).await_approval(tool_call_id="c", tool_name="t", args={})
    assert store.list_due(now=T0, orphan_before=T0) == []
    for run_id in ("done", "stopped", "quarantined", "failed", "waiting"):
        assert claim(store, run_id, "loop-a", T0, due_only=False) is None, run_id


def test_a_running_run_without_a_lease_is_claimable_only_once_it_is_orphaned(store: RunStore):
    durable.start(store, "r1", "coder", "send", {})  # running, no lease: its process may be alive
    now = datetime.now(UTC)
    assert claim(store, "r1", "loop-a", now, orphan_s=60) is None
    assert claim(store, "r1", "loop-a", now + timedelta(seconds=61), orphan_s=60).lease_owner == "loop-a"


def test_list_due_is_oldest_first_and_limited(store: RunStore):
    for run_id in ("r1", "r2", "r3"):
        interrupted_run(store, run_id)
    claim(store, "r2", "loop-a", T0)
    assert store.list_due(now=T0, orphan_before=T0) == ["r1", "r3"]
    assert store.list_due(now=T0, orphan_before=T0, limit=1) == ["r1"]


def test_a_takeover_resume_clears_the_old_lease(store: RunStore):
    interrupted_run(store, "r1")
    now = datetime.now(UTC)
    claim(store, "r1", "dead-loop", now - timedelta(hours=2))  # its lease expired long ago
    run = durable.resume(store, "r1")  # a person's resume, without an epoch
    record = store.get_run("r1")
    assert (record.lease_owner, record.lease_expiry, record.lease_epoch) == (None, None, run.epoch)
    # the dead loop's expired lease no longer makes the run claimable under the person's feet; only orphaning does
    assert claim(store, "r1", "loop-b", now + timedelta(seconds=60), orphan_s=900) is None


def test_of_racing_claimers_exactly_one_wins(store: RunStore, open_more: Callable[..., RunStore]):
    for i in range(20):
        interrupted_run(store, f"r{i}")
    stores = [open_more() for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    wins: list[tuple[str, str]] = []
    lock = threading.Lock()

    def claimer(store: RunStore, owner: str) -> None:
        barrier.wait()
        for i in range(20):
            if claim(store, f"r{i}", owner, T0) is not None:
                with lock:
                    wins.append((f"r{i}", owner))

    threads = [threading.Thread(target=claimer, args=(s, f"loop-{n}")) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(run for run, _ in wins) == sorted(f"r{i}" for i in range(20))  # each run once
    assert all(store.get_run(run).lease_owner == owner for run, owner in wins)


def claim_due(store: RunStore, owner: str, now: datetime, limit: int) -> list:
    return store.claim_due(owner=owner, lease_seconds=60.0, now=now, orphan_before=now - timedelta(seconds=900),
                           limit=limit)


def test_a_batch_claim_takes_the_oldest_due_runs_each_as_claim_run_would(store: RunStore):
    for run_id in ("r1", "r2", "r3", "r4", "r5"):
        interrupted_run(store, run_id)
    claim(store, "r2", "loop-a", T0)  # a live lease
    store.update_run("r4", next_attempt_at=T0 + timedelta(minutes=5))  # backed off
    durable.start(store, "done", "a", "send", {}).finish("ok")
    first = claim_due(store, "loop-b", T0, limit=2)
    assert [(r.id, r.lease_owner, r.lease_epoch, r.lease_expiry) for r in first] == [
        ("r1", "loop-b", 1, "2030-01-01T00:01:00.000000Z"), ("r3", "loop-b", 1, "2030-01-01T00:01:00.000000Z")]
    assert first == [store.get_run("r1"), store.get_run("r3")]  # returned as stored
    with pytest.raises(LeaseLost):
        store.save_step("r1", 1, "b", 2, epoch=0)  # fenced, as by claim_run
    assert [r.id for r in claim_due(store, "loop-b", T0, limit=2)] == ["r5"]
    assert claim_due(store, "loop-b", T0, limit=2) == []


def test_a_batch_claim_passes_a_run_that_does_not_decode_as_its_error(store: RunStore, store_url: str):
    for run_id in ("r1", "r2"):
        interrupted_run(store, run_id)
    raw_sql(store_url, "UPDATE runs SET input = '{not json' WHERE id = 'r1'")
    batch = claim_due(store, "loop-a", T0, limit=5)
    assert isinstance(batch[0], CheckpointCorrupt) and batch[0].run_id == "r1"
    assert [r.id for r in batch[1:]] == ["r2"]
    assert claim_due(store, "loop-a", T0, limit=5) == []  # claimed too, so the next batch moves past it


def test_of_racing_batch_claimers_each_run_goes_to_one(store: RunStore, open_more: Callable[..., RunStore]):
    for i in range(60):
        interrupted_run(store, f"r{i:02d}")
    stores = [open_more() for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    wins: list[tuple[str, str]] = []
    lock = threading.Lock()

    def claimer(store: RunStore, owner: str) -> None:
        barrier.wait()
        while batch := claim_due(store, owner, T0, limit=3):
            with lock:
                wins.extend((run.id, owner) for run in batch)

    threads = [threading.Thread(target=claimer, args=(s, f"loop-{n}")) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(run for run, _ in wins) == [f"r{i:02d}" for i in range(60)]  # each run once
    assert all(store.get_run(run).lease_owner == owner for run, owner in wins)


def test_a_tick_claims_due_runs_in_batches_and_hands_back_those_it_will_not_start(
    store_url: str, open_more: Callable[..., RunStore],
):
    """One claim per batch, not per run: the first batch is one run (the loop has no pace yet), the next takes the
    rest. A loop asked to stop mid-batch releases the runs it claimed and did not start, so no other replica
    waits out their leases."""
    points: list[str] = []
    store = open_more(fault=lambda point: points.append(point) if point.endswith(":after_commit") else None)
    for i in range(30):
        interrupted_run(store, f"r{i:02d}")
    clock = FakeClock(T0)
    app = ScriptedApp(store, clock)
    loop = RecoveryLoop(store, app, RecoverSettings(), clock=clock, owner="loop-a")
    assert len(loop.tick().attempted) == 30
    assert Counter(p for p in points if p.startswith("claim")) == {"claim_due:after_commit": 2}
    assert {r.status for r in store.list_runs()} == {"finished"}

    for i in range(30, 40):
        interrupted_run(store, f"r{i:02d}")

    def stop_after_two(run_id: str, epoch: int) -> None:
        app.resume(run_id, epoch)
        if len(app.calls) == 32:
            stopping.stop_event.set()

    stopping = RecoveryLoop(store, stop_after_two, RecoverSettings(), clock=clock, owner="loop-b")
    stopping._pace = loop._pace  # as a loop that has run before: it claims the ten at once
    assert stopping.tick().attempted == ["r30", "r31"]
    left = [store.get_run(f"r{i:02d}") for i in range(32, 40)]
    assert {(r.status, r.lease_owner, r.lease_expiry) for r in left} == {("interrupted", None, None)}
    assert store.list_due(now=T0, orphan_before=T0) == [f"r{i:02d}" for i in range(32, 40)]


def test_of_two_racing_heal_forks_exactly_one_is_made(store: RunStore, open_more: Callable[..., RunStore]):
    interrupted_run(store, "r1", steps=2)
    stores = [open_more(), open_more()]
    barrier = threading.Barrier(2)
    results: list[str] = []

    def fork(store: RunStore) -> None:
        barrier.wait()
        try:
            store.fork("r1", 2, "r1.heal", note="why")
            results.append("made")
        except RunExists:
            results.append("exists")

    threads = [threading.Thread(target=fork, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["exists", "made"]
    assert sorted(store.load_steps("r1.heal")) == [0, 1]


# --- loops holding leases ---


def test_two_loops_on_one_store_never_resume_the_same_run_at_once(store: RunStore,
                                                                   open_more: Callable[..., RunStore]):
    for i in range(24):
        interrupted_run(store, f"r{i}")
    active: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    overlaps: list[str] = []
    lock = threading.Lock()

    def app_for(store: RunStore) -> Callable[[str, int], None]:
        def resume(run_id: str, epoch: int) -> None:
            with lock:
                active[run_id] += 1
                calls[run_id] += 1
                if active[run_id] > 1:
                    overlaps.append(run_id)
            try:
                with durable.resume(store, run_id, epoch=epoch) as run:
                    time.sleep(0.005)
                    run.finish("ok")
            finally:
                with lock:
                    active[run_id] -= 1
        return resume

    loops = [RecoveryLoop(s, app_for(s)) for s in (open_more(), open_more())]
    threads = [threading.Thread(target=loop.tick) for loop in loops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [] and set(calls.values()) == {1} and len(calls) == 24
    assert {r.status for r in store.list_runs()} == {"finished"}
    assert {r.lease_owner for r in store.list_runs()} <= {loop.owner for loop in loops}  # who finished each


def test_a_runner_whose_lease_is_taken_over_gets_lease_lost_on_its_next_write_and_stops(
        store: RunStore, open_more: Callable[..., RunStore]):
    interrupted_run(store, "r1", steps=1)
    clock = FakeClock()
    inside, go = threading.Event(), threading.Event()
    store_a, store_b = open_more(), open_more()
    after_steal: list[str] = []

    def stalled(run_id: str, epoch: int) -> None:
        with durable.resume(store_a, run_id, epoch=epoch) as run:
            run.step("step-0", lambda: 0)
            inside.set()
            go.wait(30)  # a GC pause, a frozen VM: the lease lapses meanwhile
            try:
                run.step("step-1", lambda: "stale")
            except Exception:  # an agent's broad catch cannot keep a fenced run going: LeaseLost is no Exception
                after_steal.append("swallowed")
            after_steal.append("kept going")

    loop_a = RecoveryLoop(store_a, stalled, RecoverSettings(lease_seconds=60), clock=clock, owner="loop-a")
    report_a: list = []
    thread = threading.Thread(target=lambda: report_a.append(loop_a.tick()))
    thread.start()
    try:
        assert inside.wait(30)
        clock.advance(61)  # loop A's heartbeat (every 20 s) never ran: its lease expired
        loop_b = RecoveryLoop(store_b, ScriptedApp(store_b, clock), clock=clock, owner="loop-b")
        assert loop_b.tick().attempted == ["r1"]
    finally:
        go.set()
        thread.join(30)
    assert after_steal == []  # the stale runner stopped at its next write
    assert "lease-lost" in report_a[0].rules("r1")
    run = store.get_run("r1")
    assert (run.status, run.lease_epoch, run.lease_owner) == ("finished", 2, "loop-b")
    assert [s.epoch for s in store.load_steps("r1").values()] == [0]  # nothing of the stale runner's


def test_the_heartbeat_keeps_a_long_run_leased(store: RunStore, open_more: Callable[..., RunStore]):
    interrupted_run(store, "r1")
    store_a, store_b = open_more(), open_more()
    started, done = threading.Event(), threading.Event()

    def slow(run_id: str, epoch: int) -> None:
        with durable.resume(store_a, run_id, epoch=epoch) as run:
            started.set()
            time.sleep(2.5)  # five lease periods: only the heartbeat (every 1/3 s) keeps the lease
            run.finish("ok")
        done.set()

    settings = RecoverSettings(lease_seconds=1.0)
    thread = threading.Thread(target=RecoveryLoop(store_a, slow, settings).tick)
    thread.start()
    try:
        assert started.wait(30)
        other = RecoveryLoop(store_b, ScriptedApp(store_b, FakeClock()), settings)
        while not done.is_set():
            assert other.tick().attempted == []
            time.sleep(0.1)
    finally:
        thread.join(30)
    assert store.get_run("r1").status == "finished"


def test_the_keeper_renews_only_while_it_keeps_and_its_thread_ends_when_idle(store: RunStore):
    interrupted_run(store, "r1")
    clock = FakeClock(T0)
    epoch = claim(store, "r1", "loop-a", T0).lease_epoch
    keeper = lease.Keeper(store, owner="loop-a", seconds=60, clock=clock, every=0.05)
    with keeper.keep("r1", epoch):
        clock.advance(100)  # past the claimed expiry: only renewals keep it
        deadline = time.monotonic() + 10
        while store.get_run("r1").lease_expiry != "2030-01-01T00:02:40.000000Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.get_run("r1").lease_expiry == "2030-01-01T00:02:40.000000Z"  # now + 60 s
    lease.release(store, "r1", epoch)
    clock.advance(100)
    time.sleep(0.3)  # several periods: a renewal now would write an expiry again
    assert (store.get_run("r1").lease_owner, store.get_run("r1").lease_expiry) == (None, None)
    assert keeper._thread is None or not keeper._thread.is_alive()


def test_hold_keeps_a_run_started_outside_the_loop_until_it_ends(store: RunStore):
    clock = FakeClock(T0)
    loop = RecoveryLoop(store, ScriptedApp(store, clock), RecoverSettings(orphan_seconds=0), clock=clock)
    run = durable.start(store, "r1", "coder", "send", {})
    with lease.hold(store, run, owner="agent-1", seconds=60, clock=clock):
        assert store.get_run("r1").lease_owner == "agent-1"
        clock.advance(30)
        assert loop.tick().attempted == []  # held, though a lease-less run this old would be taken
        run.finish("ok")
    record = store.get_run("r1")
    assert (record.status, record.lease_owner) == ("finished", None)


@pytest.mark.slow
def test_a_run_held_by_a_process_that_was_killed_is_recovered_once_its_lease_expires(store: RunStore,
                                                                                    store_url: str, tmp_path: Path):
    child = textwrap.dedent(f"""
        import os, signal
        from lousho.recover import durable, lease
        from lousho.recover.store import open as open_store
        store = open_store({store_url!r})
        run = durable.start(store, "r1", "coder", "send", {{}})
        run.step("a", lambda: 1)
        with lease.hold(store, run, owner="agent-doomed", seconds=2.0):
            print("held", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # dies holding the lease, mid-run
    """)
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert result.returncode == -9 and "held" in result.stdout, result.stderr
    record = store.get_run("r1")
    assert (record.status, record.lease_owner) == ("running", "agent-doomed")
    loop = RecoveryLoop(store, ScriptedApp(store, FakeClock()), RecoverSettings(lease_seconds=1.0))
    assert loop.tick().attempted == []  # the lease is still live
    time.sleep(2.1)
    assert loop.tick().attempted == ["r1"]
    record = store.get_run("r1")
    assert (record.status, record.attempts) == ("finished", 2)


def test_a_batch_whose_runs_slowed_down_is_claimed_afresh_so_no_run_starts_late_in_its_lease(
    store: RunStore,
):
    """A batch is sized by the pace of recent runs; when runs then slow down, the runs still waiting in the batch
    would start with their leases (not renewed while they wait) nearly or wholly spent, so that another replica may
    already be taking them over. Past half a lease the loop gives the rest back and claims them again, so every run
    starts with at least half of a fresh lease left."""
    for i in range(8):
        interrupted_run(store, f"r{i}")
    clock = FakeClock(T0)
    settings = RecoverSettings()
    app = ScriptedApp(store, clock)
    left_at_start: dict[str, float] = {}

    def slow(run_id: str, epoch: int) -> None:
        expiry = datetime.fromisoformat(store.get_run(run_id).lease_expiry)
        left_at_start[run_id] = (expiry - clock()).total_seconds()
        app.resume(run_id, epoch)
        clock.advance(settings.lease_seconds * 0.3)  # each run now takes 30% of a lease

    loop = RecoveryLoop(store, slow, settings, clock=clock, owner="loop-a")
    loop._pace = 0.001  # as a loop whose runs were quick: it claims all eight at once
    assert sorted(loop.tick().attempted) == [f"r{i}" for i in range(8)]
    assert {r.status for r in store.list_runs()} == {"finished"}
    assert min(left_at_start.values()) >= settings.lease_seconds / 2, left_at_start
