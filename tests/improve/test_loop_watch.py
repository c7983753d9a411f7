"""After the write: the monitor on live runs in a real observe daemon, and the traffic canary."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from agent_runs import emit_run
from improve_support import ADD_FIX
from loop_support import audit_actions, files, loop

from lousho.agent.traffic_route import route
from lousho.improve.cycle import run_cycle
from lousho.improve.harness import read_harness
from lousho.improve.state import load_state, now_utc
from lousho.improve.watch_lease import new_owner
from lousho.improve.watcher import tick
from lousho.observe.client.export import instrument
from lousho.observe.client.process import DaemonProcess


def _emit(url: str, revision: str, rate: float, n: int, seed: int) -> None:
    rng = random.Random(seed)
    provider = instrument("ledger", url, batch=True)
    for i in range(n):
        emit_run(provider, f"{revision}-{seed}-{i}", agent="ledger", revision=revision,
                 outcome="pass" if rng.random() < rate else "fail")
    provider.shutdown()


@pytest.mark.system
@pytest.mark.parametrize(("rate_after", "expected"), [(0.9, "kept"), (0.2, "rollback")])
def test_the_monitor_keeps_a_good_edit_and_rolls_back_a_bad_one(tmp_path: Path, daemon: DaemonProcess,
                                                                rate_after: float, expected: str) -> None:
    # The real clock: the monitor splits live runs at the time of the apply.
    with loop(tmp_path, {"invariant": [ADD_FIX]}, observe=daemon.url, clock=now_utc) as (setup, _, _):
        base_files = files(setup.agent_dir)
        before = read_harness(setup.agent_dir).revision
        _emit(daemon.url, before, 0.6, 60, seed=1)
        applied = run_cycle(setup)
        assert applied.outcome == "applied", applied.reason
        assert load_state(setup.paths).watched.design == "concurrent", "the write holds the base back by default"
        # These runs reach the daemon without the router (no lousho.traffic.arm): no held-back run will come,
        # so past 20 unrouted sessions the watch falls back to stratified, records it and ends the holdback.
        _emit(daemon.url, applied.revision, rate_after, 60, seed=2)
        result = tick(setup, new_owner())
        assert result.action == expected, result.reason
        assert "[stratified design]" in result.reason
        state = load_state(setup.paths)
        assert state.watched.design == "stratified" and "not routed" in state.watched.design_reason
        assert {"monitor-design", "holdback-end"} <= set(audit_actions(setup.agent_dir))
        assert route(setup.agent_dir, "new").arm is None
        if expected == "kept":
            assert state.watched.status == "kept"
            assert ADD_FIX in (setup.agent_dir / "instructions.md").read_text()
            assert audit_actions(setup.agent_dir)[-2:] == ["monitor", "kept"]
        else:
            assert state.watched.status == "rolled-back" and state.cooldown_until
            assert files(setup.agent_dir) == base_files


@pytest.mark.system
def test_the_monitor_waits_for_enough_runs(tmp_path: Path, daemon: DaemonProcess) -> None:
    with loop(tmp_path, {"invariant": [ADD_FIX]}, observe=daemon.url, clock=now_utc) as (setup, _, _):
        applied = run_cycle(setup)
        assert applied.outcome == "applied"
        _emit(daemon.url, applied.revision, 0.9, 5, seed=3)
        waiting = tick(setup, new_owner())
        assert waiting.action == "monitoring" and "waiting for held-back runs" in waiting.reason, waiting.reason
        assert load_state(setup.paths).watched.design == "concurrent", "5 unrouted sessions are too few to give up"


def test_the_traffic_canary_retires_a_harmful_candidate_without_writing(tmp_path: Path) -> None:
    with loop(tmp_path, {"invariant": [ADD_FIX]}, config={"traffic_canary": True}) as (setup, _, _):
        untouched = files(setup.agent_dir)
        started = run_cycle(setup)
        assert started.outcome == "traffic", started.reason
        assert files(setup.agent_dir) == untouched
        arms = [route(setup.agent_dir, f"session-{i}").arm for i in range(200)]
        assert arms.count("candidate") == 50 and arms[:4].count("candidate") <= 1
        for n in range(1, 201):
            assert arms[:n].count("candidate") <= 0.25 * n
        retired = tick(setup, new_owner(), traffic_outcomes=lambda rev: ([False] * 10, [True] * 40))
        assert retired.action == "traffic" and retired.reason.startswith("retired")
        assert files(setup.agent_dir) == untouched
        assert route(setup.agent_dir, "session-new").arm is None
        assert "traffic-retire" in audit_actions(setup.agent_dir)


def test_the_traffic_canary_promotes_a_good_candidate_through_the_writer(tmp_path: Path) -> None:
    with loop(tmp_path, {"invariant": [ADD_FIX]}, config={"traffic_canary": True, "approval": "manual"}) as (
            setup, _, _):
        from lousho.improve.cycle import apply_proposal

        queued = run_cycle(setup)
        assert queued.outcome == "queued", "in manual mode the canary starts only after a person approves"
        assert route(setup.agent_dir, "s").arm is None
        started = apply_proposal(setup, queued.proposal_id, by="person")
        assert started.outcome == "traffic"
        waiting = tick(setup, new_owner(), traffic_outcomes=lambda rev: ([True] * 20, [True] * 60))
        assert waiting.action == "traffic" and "20 of 50" in waiting.reason
        owner = new_owner()
        from lousho.improve.watch_lease import release

        release(setup.paths, load_lease_owner(setup))
        promoted = tick(setup, owner, traffic_outcomes=lambda rev: ([True] * 48 + [False] * 2, [True] * 140))
        assert promoted.reason.startswith("promoted"), promoted.reason
        assert ADD_FIX in (setup.agent_dir / "instructions.md").read_text()
        assert load_state(setup.paths).watched.status == "monitoring"


def load_lease_owner(setup) -> str:  # type: ignore[no-untyped-def]
    import json

    return json.loads(setup.paths.lease.read_text())["owner"]
