"""The monitor's holdback: after a write the base revision keeps a share of new sessions through the traffic
canary's router; `lousho agent run` serves those sessions the base and labels their runs; the live monitor
compares the arms concurrently; the holdback ends with the watch. With it off (or a canary running) the watch
runs stratified, and every record says which."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from improve_support import ADD_FIX
from loop_support import Clock, audit_actions, loop
from scipy.stats import binom

from lousho.agent.directory import harness_revision
from lousho.agent.loop import RunOptions
from lousho.agent.runner import AgentSetup, open_agent
from lousho.agent.traffic_route import (
    BASE,
    CANDIDATE,
    Route,
    TrafficFileInvalid,
    held_back,
    read_traffic,
    route,
)
from lousho.analysis import monitor as analysis_monitor
from lousho.analysis.frames import runs
from lousho.improve import traffic
from lousho.improve.cli import improve
from lousho.improve.cycle import LoopSetup, force_apply
from lousho.improve.harness import Harness, read_harness
from lousho.improve.state import ConfigInvalid, LoopConfig, Paths, load_config, load_state, now_utc
from lousho.improve.watch_lease import new_owner
from lousho.improve.watcher import tick
from lousho.models.config import ModelConfig
from lousho.observe.client.process import DaemonProcess
from lousho.observe.client.store_client import connect

PLAIN = "You are a careful bookkeeping assistant.\n"
TOLERANCE = 1e-6  # two-sided: a binomial count outside its interval this unlikely fails the test


def _count_interval(n: int, share: float) -> tuple[float, float]:
    return tuple(binom.interval(1 - TOLERANCE, n, share))  # type: ignore[return-value]


def _good_base(setup: LoopSetup) -> tuple[Harness, Harness]:
    """Make the directory's harness one that adds with the tool (passes), and return it with an edit that
    drops the rule (the agent then adds in its head, off by one: every add case fails)."""
    (setup.agent_dir / "instructions.md").write_text(PLAIN + f"- {ADD_FIX}\n", encoding="utf-8")
    base = read_harness(setup.agent_dir)
    return base, base.with_file("instructions.md", PLAIN)


# --- the router: the share, at random, sticky ---


@pytest.mark.parametrize("share", [0.1, 0.2, 0.25])
def test_a_holdback_keeps_its_share_of_sessions_on_the_base_at_random_and_each_session_its_arm(tmp_path, share):
    with loop(tmp_path, {}) as (setup, _, _):
        base, edit = _good_base(setup)
        force_apply(setup, edit, reason="a test edit")
    agent_dir = setup.agent_dir
    paths = Paths(agent_dir)
    # The loop's default is 0.2; start the others by hand, as the loop does after a write.
    if share != 0.2:
        traffic.end_holdback(paths, "the test starts another")
        traffic.start_holdback(paths, base, edit, agent_dir, share=share)
    data = read_traffic(agent_dir)
    assert data is not None and (data["kind"], data["status"], data["share"]) == ("holdback", "running", share)
    before = (agent_dir / ".lousho" / "traffic.json").read_bytes()
    n = 20_000
    served = [route(agent_dir, f"session-{i}") for i in range(n)]
    held = [r.arm == BASE for r in served]
    low, high = _count_interval(n, share)
    assert low <= sum(held) <= high, (sum(held), low, high)
    copy = next(r.directory for r in served if r.arm == BASE)
    assert harness_revision(copy) == base.revision and harness_revision(agent_dir) == edit.revision
    assert all(r == (Route(copy, BASE) if h else Route(agent_dir, CANDIDATE))
               for r, h in zip(served, held, strict=True))
    # Sticky, and independent of arrival order: the same sessions again, backwards, get the same arms.
    assert [route(agent_dir, f"session-{i}").arm == BASE for i in reversed(range(0, n, 97))] == held[::97][::-1]
    # Random, not every k-th session: the canary's router sends a fixed pattern; a held-back session is
    # followed by another held-back one as often as any session is held back.
    pairs = sum(a and b for a, b in zip(held, held[1:], strict=False))
    low, high = _count_interval(sum(held[:-1]), share)
    assert low <= pairs <= high, (pairs, low, high)
    assert (agent_dir / ".lousho" / "traffic.json").read_bytes() == before, "a holdback writes nothing per session"


def test_each_holdback_draws_its_sessions_anew(tmp_path):
    with loop(tmp_path, {}) as (setup, _, _):
        base, edit = _good_base(setup)
        force_apply(setup, edit, reason="a first edit")
        sessions = [f"s{i}" for i in range(5_000)]
        first = {s for s in sessions if route(setup.agent_dir, s).arm == BASE}
        again = edit.with_file("instructions.md", PLAIN + "- Be brief.\n")
        force_apply(setup, again, reason="a second edit")
        second = {s for s in sessions if route(setup.agent_dir, s).arm == BASE}
    # Same users held back from every edit would never get one; with a fresh salt the overlap is share^2.
    low, high = _count_interval(len(sessions), 0.2 * 0.2)
    assert low <= len(first & second) <= high, (len(first), len(second), len(first & second))


def test_the_holdback_share_is_a_config_key_in_its_range_and_zero_turns_it_off(tmp_path):
    paths = Paths(tmp_path / "agent")
    paths.ensure()
    assert load_config(paths).holdback == LoopConfig().holdback == analysis_monitor.HOLDBACK == traffic.HOLDBACK_SHARE
    assert traffic.HOLDBACK_RANGE == analysis_monitor.HOLDBACK_RANGE
    for value in (0, 0.1, 0.25):
        paths.config.write_text(json.dumps({"holdback": value}))
        assert load_config(paths).holdback == value
    for value in (0.05, 0.3, 1, -0.2, "0.2", True):
        paths.config.write_text(json.dumps({"holdback": value}))
        with pytest.raises(ConfigInvalid):
            load_config(paths)


def test_a_holdback_outside_its_range_or_beside_a_canary_is_refused(tmp_path):
    with loop(tmp_path, {}, config={"holdback": 0}) as (setup, _, _):
        base, edit = _good_base(setup)
        force_apply(setup, edit, reason="a test edit")
        paths = setup.paths
        for share in (0.05, 0.3):
            with pytest.raises(traffic.TrafficInvalid):
                traffic.start_holdback(paths, base, edit, setup.agent_dir, share=share)
        traffic.start(paths, edit, edit.with_file("instructions.md", PLAIN + "- Be brief.\n"), setup.agent_dir,
                      share=0.25, max_sessions=50)
        with pytest.raises(traffic.TrafficRunning):
            traffic.start_holdback(paths, base, edit, setup.agent_dir, share=0.2)
        # A hand-edited holdback without its hash key routes nothing: refused, as any broken traffic file.
        path = setup.agent_dir / ".lousho" / "traffic.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "kind": "holdback"}), encoding="utf-8")
        with pytest.raises(TrafficFileInvalid, match="salt"):
            route(setup.agent_dir, "s1")


# --- through the loop, the agent and the store ---


def _serve(setup: LoopSetup, model: ModelConfig, observe: str, sessions: list[str]) -> None:
    """Each session's run as `lousho agent run --session S` makes it (routed, labelled with its arm and
    session), on agents kept open per served directory so the test stays fast."""
    store = f"sqlite:///{setup.agent_dir.parent / 'runs.db'}"
    check = setup.agent_dir.parent / "check.py"
    inputs = ("add 2 3 4", "add 10 20 5")
    with ExitStack() as stack:
        agents = {}
        for i, session in enumerate(sessions):
            served = route(setup.agent_dir, session)
            if served.directory not in agents:
                live = AgentSetup(served.directory, model, store, observe, check_path=check, batch_export=True)
                agents[served.directory] = (stack.enter_context(open_agent(live, {})), live)
            agent, live = agents[served.directory]
            agent.send(inputs[i % 2], options=RunOptions(case_id=("add-a", "add-b")[i % 2], traffic_arm=served.arm,
                                                         session_id=session), setup=live.to_payload())


def _cli_run(setup: LoopSetup, model: ModelConfig, observe: str, session: str) -> dict:
    from lousho.agent.cli import run

    done = CliRunner().invoke(run, [
        str(setup.agent_dir), "add 2 3 4", "--model-url", model.url, "--model", model.model, "--store",
        f"sqlite:///{setup.agent_dir.parent / 'runs.db'}", "--observe", observe, "--check",
        str(setup.agent_dir.parent / "check.py"), "--case", "add-a", "--session", session, "--run-id",
        f"cli-{session}", "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


@pytest.fixture
def watched_loop(tmp_path: Path, daemon: DaemonProcess, request) -> Iterator[tuple[LoopSetup, ModelConfig]]:
    with loop(tmp_path, {}, config=getattr(request, "param", None), observe=daemon.url, clock=now_utc) as (
            setup, model, _):
        yield setup, ModelConfig(model.url, "agent")


@pytest.mark.system
@pytest.mark.parametrize("watched_loop", [{"holdback": 0.25}], indirect=True)
def test_an_applied_edit_is_judged_against_the_held_back_sessions_and_the_holdback_ends_with_the_watch(
        watched_loop, daemon):
    setup, model = watched_loop
    base, edit = _good_base(setup)
    force_apply(setup, edit, reason="an edit that drops the add rule")
    watched = load_state(setup.paths).watched
    assert (watched.design, watched.holdback) == ("concurrent", 0.25)
    assert "held back on the base" in watched.design_reason and "holdback-start" in audit_actions(setup.agent_dir)
    applied_at = datetime.fromisoformat(watched.applied_at)
    data = read_traffic(setup.agent_dir)
    # `lousho agent run` itself, for one held-back session and one not: the base copy serves the first.
    one_held = next(f"cli-{i}" for i in range(1000) if held_back(data, f"cli-{i}"))
    one_not = next(f"cli-{i}" for i in range(1000) if not held_back(data, f"cli-{i}"))
    for session in (one_held, one_not):
        _cli_run(setup, model, daemon.url, session)
    n = 200
    _serve(setup, model, daemon.url, [f"s-{i}" for i in range(n)])

    after = runs(connect(daemon.url), agent="ledger", since=applied_at)
    assert after.height == n + 2
    arms = dict(zip(after["run_id"], after["traffic_arm"], strict=True))
    assert (arms[f"cli-{one_held}"], arms[f"cli-{one_not}"]) == (BASE, CANDIDATE)
    revisions = {(a, r) for a, r in zip(after["traffic_arm"], after["harness_revision"], strict=True)}
    assert revisions == {(BASE, base.revision), (CANDIDATE, edit.revision)}, "each arm runs its own revision"
    assert set(after["conversation_id"]) == {f"s-{i}" for i in range(n)} | {one_held, one_not}
    held = after.filter(after["traffic_arm"] == BASE).height
    low, high = _count_interval(n + 2, 0.25)
    assert low <= held <= high and held >= 20, (held, low, high)

    result = tick(setup, new_owner())
    assert result.action == "rollback" and "[concurrent design]" in result.reason, result.reason
    monitor_line = [json.loads(line) for line in setup.paths.audit.read_text().splitlines()
                    if json.loads(line)["action"] == "monitor"][-1]
    assert monitor_line["design"] == "concurrent" and "held back on the base" in monitor_line["assumptions"]
    # The watch ended: the base is the directory's harness again and every new session gets it, unlabelled.
    state = load_state(setup.paths).watched
    assert (state.status, state.design) == ("rolled-back", "concurrent")
    assert read_harness(setup.agent_dir).revision == base.revision
    assert (read_traffic(setup.agent_dir) or {})["status"] == "ended"
    assert route(setup.agent_dir, one_held) == route(setup.agent_dir, "new") == Route(setup.agent_dir, None)
    assert audit_actions(setup.agent_dir).count("holdback-end") == 1


@pytest.mark.system
@pytest.mark.parametrize("watched_loop", [{"holdback": 0}], indirect=True)
def test_with_the_holdback_off_the_watch_runs_stratified_and_every_record_says_so(watched_loop, daemon):
    setup, model = watched_loop
    _, edit = _good_base(setup)
    _serve(setup, model, daemon.url, [f"before-{i}" for i in range(20)])
    force_apply(setup, edit, reason="an edit that drops the add rule")
    watched = load_state(setup.paths).watched
    assert (watched.design, watched.holdback) == ("stratified", None)
    assert "off in improve.json" in watched.design_reason
    assert "holdback-skipped" in audit_actions(setup.agent_dir) and read_traffic(setup.agent_dir) is None
    assert route(setup.agent_dir, "s") == Route(setup.agent_dir, None)
    _serve(setup, model, daemon.url, [f"after-{i}" for i in range(20)])
    result = tick(setup, new_owner())
    assert result.action == "rollback" and "[stratified design]" in result.reason, result.reason
    shown = CliRunner().invoke(improve, ["status", str(setup.agent_dir)])
    assert shown.exit_code == 0, shown.output
    assert "monitor      stratified: no holdback: off in improve.json" in shown.output


# --- the holdback ends with the watch, whatever ends it ---


def _running(setup: LoopSetup) -> bool:
    return traffic.running_holdback(setup.paths) is not None


def test_the_holdback_ends_when_the_watch_expires(tmp_path):
    clock = Clock()
    with loop(tmp_path, {}, clock=clock) as (setup, _, _):
        _, edit = _good_base(setup)
        force_apply(setup, edit, reason="a test edit")
        owner = new_owner()
        assert tick(setup, owner).action in ("guard", "monitoring") and _running(setup)
        clock.advance(days=7, minutes=1)
        assert tick(setup, owner).action == "kept-unverified"
        assert not _running(setup) and route(setup.agent_dir, "s").arm is None
        assert audit_actions(setup.agent_dir)[-2:] == ["kept-unverified", "holdback-end"]


def test_a_person_changing_the_harness_ends_the_holdback(tmp_path):
    with loop(tmp_path, {}) as (setup, _, _):
        _, edit = _good_base(setup)
        force_apply(setup, edit, reason="a test edit")
        (setup.agent_dir / "instructions.md").write_text("A person's own words.\n", encoding="utf-8")
        assert tick(setup, new_owner()).action == "superseded"
        assert not _running(setup) and route(setup.agent_dir, "s").arm is None


def test_a_new_edit_replaces_the_holdback_and_a_running_canary_leaves_the_watch_stratified(tmp_path):
    with loop(tmp_path, {}) as (setup, _, _):
        base, edit = _good_base(setup)
        force_apply(setup, edit, reason="a first edit")
        second = edit.with_file("instructions.md", PLAIN + "- Be brief.\n")
        force_apply(setup, second, reason="a second edit")
        data = traffic.running_holdback(setup.paths)
        assert data is not None and (data["base_revision"], data["candidate_revision"]) == (edit.revision,
                                                                                           second.revision)
        assert audit_actions(setup.agent_dir).count("holdback-end") == 1
        traffic.end_holdback(setup.paths, "the test starts a canary")
        traffic.start(setup.paths, second, second.with_file("instructions.md", PLAIN), setup.agent_dir, share=0.25,
                      max_sessions=50)
        force_apply(setup, base, reason="a person's write while a canary runs")
        watched = load_state(setup.paths).watched
        assert watched.design == "stratified" and "a traffic canary" in watched.design_reason
        assert (read_traffic(setup.agent_dir) or {})["kind"] == "canary", "the canary is left alone"


def test_a_holdback_no_watched_edit_accounts_for_is_ended_by_the_next_tick(tmp_path):
    with loop(tmp_path, {}) as (setup, _, _):
        base, edit = _good_base(setup)
        force_apply(setup, edit, reason="a test edit")
        # As if the loop crashed after the holdback started but before the watch was recorded, and a person
        # then edited the harness (with the applied edit still live, the next tick would record its watch:
        # test_loop_crash).
        setup.paths.state.unlink()
        (setup.agent_dir / "instructions.md").write_text(PLAIN + "- Be brief.\n", encoding="utf-8")
        assert _running(setup)
        owner = new_owner()
        tick(setup, owner)
        assert _running(setup), "a minute's grace: another process may be recording its watch right now"
        data = read_traffic(setup.agent_dir) or {}
        traffic_file = setup.agent_dir / ".lousho" / "traffic.json"
        traffic_file.write_text(json.dumps({**data, "started_at": (now_utc() - timedelta(minutes=2)).isoformat()}))
        tick(setup, owner)
        assert not _running(setup) and "no edit under watch" in (read_traffic(setup.agent_dir) or {})["reason"]

