"""The provider-outage breaker (seed 000 "Provider outages"): 3 provider failures in a row pause the loop, one probe
at a time (a store reservation with an expiry) at growing intervals, and the first probe that gets through ends it.

The store's breaker methods run against every backend; the last tests drive the reference agent through the
scripted model server over HTTP, with 503s (an outage) and 401s (a bad key: no outage).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_loop_support import AUTH, PROVIDER, SUCCESS, FakeClock, ScriptedApp, interrupted_run

from lousho.agent import directory as agent_directory
from lousho.agent.loop import Agent
from lousho.models.config import ModelConfig
from lousho.models.errors import ProviderError
from lousho.models.faults import Fault
from lousho.models.scripted import ScriptedModelServer
from lousho.recover import durable
from lousho.recover._codec import parse_utc
from lousho.recover.loop import RecoverSettings, RecoveryLoop
from lousho.recover.store import RunStore

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))
from agent_support import EXAMPLE, copy_example  # noqa: E402  (tests/agent's helper: the shipped example agent)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
ERROR_503 = {"message": "HTTP 503", "code": "LOUSHO_PROVIDER_UNKNOWN", "category": "unknown", "retryable": True}


def failure(store: RunStore, now: datetime, provider: bool = True):
    return store.record_outcome(provider_failure=provider, now=now, threshold=3,
                                first_probe_at=now + timedelta(seconds=30), error=ERROR_503 if provider else None)


# --- the breaker, in the store ---


def test_the_third_provider_failure_in_a_row_opens_the_breaker_once_and_any_other_outcome_closes_it(
        store: RunStore):
    assert not store.get_outage().paused
    assert [failure(store, T0)[1] for _ in range(2)] == [None, None]
    state, change = failure(store, T0)
    assert change == "opened" and state.paused and state.failures == 3
    assert (state.paused_since, state.next_probe_at, state.last_error) == (
        "2030-01-01T00:00:00.000000Z", "2030-01-01T00:00:30.000000Z", ERROR_503)
    state, change = failure(store, T0 + timedelta(seconds=1))
    assert change is None and state.failures == 4 and state.paused_since == "2030-01-01T00:00:00.000000Z"
    state, change = failure(store, T0, provider=False)
    assert change == "closed" and not state.paused and state.failures == 0 and state.last_error is None
    assert failure(store, T0, provider=False)[1] is None


def test_a_success_between_provider_failures_breaks_the_run_of_failures(store: RunStore):
    failure(store, T0)
    failure(store, T0)
    failure(store, T0, provider=False)
    state, change = failure(store, T0)
    assert change is None and state.failures == 1 and not state.paused


def test_the_probe_slot_is_one_reservation_with_an_expiry(store: RunStore, open_more: Callable[..., RunStore]):
    other = open_more()
    assert not store.reserve_probe(owner="a", now=T0, expiry=T0 + timedelta(seconds=60))  # closed: no probe
    for _ in range(3):
        failure(store, T0)
    due = T0 + timedelta(seconds=30)
    assert not store.reserve_probe(owner="a", now=due - timedelta(seconds=1), expiry=due)  # not yet due
    assert store.reserve_probe(owner="a", now=due, expiry=due + timedelta(seconds=60))
    assert not other.reserve_probe(owner="b", now=due, expiry=due + timedelta(seconds=60))  # one at a time
    assert store.renew_probe(owner="a", expiry=due + timedelta(seconds=120), run_id="r1")
    assert not other.renew_probe(owner="b", expiry=due + timedelta(seconds=120))
    state = other.get_outage()
    assert (state.probe_owner, state.probe_run, state.probe_expiry) == ("a", "r1", "2030-01-01T00:02:30.000000Z")
    # the holder died: once the slot expires, another replica takes it, and the old holder cannot release it
    assert other.reserve_probe(owner="b", now=due + timedelta(seconds=120), expiry=due + timedelta(seconds=180))
    assert not store.release_probe(owner="a", now=due, failed=True, next_probe_at=due)
    later = due + timedelta(seconds=200)
    assert other.release_probe(owner="b", now=later, failed=True, next_probe_at=later + timedelta(seconds=60))
    state = store.get_outage()
    assert (state.probe_owner, state.probes, parse_utc(state.next_probe_at)) == (
        None, 1, later + timedelta(seconds=60))
    assert other.reserve_probe(owner="b", now=later + timedelta(seconds=60), expiry=later + timedelta(minutes=5))
    failure(store, later, provider=False)  # a success elsewhere ends the pause and frees the slot
    state = store.get_outage()
    assert (state.paused, state.probe_owner, state.probes) == (False, None, 0)
    assert not other.release_probe(owner="b", now=later, failed=False, next_probe_at=None)


def test_of_two_racing_probers_exactly_one_gets_the_slot(store: RunStore, open_more: Callable[..., RunStore]):
    for _ in range(3):
        failure(store, T0)
    stores = [open_more() for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    got: list[str] = []
    due = T0 + timedelta(seconds=30)

    def probe(store: RunStore, owner: str) -> None:
        barrier.wait()
        if store.reserve_probe(owner=owner, now=due, expiry=due + timedelta(seconds=60)):
            got.append(owner)

    threads = [threading.Thread(target=probe, args=(s, f"loop-{i}")) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 1 and store.get_outage().probe_owner == got[0]


# --- the loop ---


class Watched:
    def __init__(self, store: RunStore, **settings: object) -> None:
        self.clock = FakeClock()
        self.app = ScriptedApp(store, self.clock)
        self.outages: list[bool] = []
        self.quarantined: list[str] = []
        self.loop = RecoveryLoop(store, self.app, RecoverSettings(interval=10.0, **settings),  # type: ignore[arg-type]
                                 clock=self.clock, on_outage=self.outages.append,
                                 on_quarantined=lambda run: self.quarantined.append(run.id))

    def tick_after(self, seconds: float = 0.0) -> list[str]:
        self.clock.advance(seconds)
        return self.loop.tick().attempted


def test_an_outage_pauses_the_loop_probes_one_run_at_growing_intervals_and_resumes_when_one_gets_through(
        store: RunStore):
    for i in range(5):
        interrupted_run(store, f"r{i}", failures=2)  # one more counted failure would quarantine them
    w = Watched(store, max_attempts=3)
    w.app.default = PROVIDER
    assert w.tick_after() == ["r0", "r1", "r2"]  # the third failure in a row pauses the rest of the tick
    assert w.outages == [True] and store.get_outage().paused
    # r0 and r1 failed before the pause: counted, at the cap. r2's failure began the pause: not counted.
    assert w.quarantined == ["r0", "r1"]
    assert [store.get_run(f"r{i}").consecutive_failures for i in range(5)] == [3, 3, 2, 2, 2]
    state = store.get_outage()
    first_probe = parse_utc(state.next_probe_at)
    assert 10 <= (first_probe - w.clock.now).total_seconds() <= 11  # the interval, plus jitter
    assert w.tick_after(9) == []  # not yet
    probes = []
    for expected_wait in (10, 20, 40):  # each failed probe doubles the wait for the next
        w.clock.now = parse_utc(store.get_outage().next_probe_at)
        probes += w.tick_after()
        state = store.get_outage()
        assert state.paused and state.probes == len(probes)
        wait = (parse_utc(state.next_probe_at) - w.clock.now).total_seconds()
        assert expected_wait * 2 <= wait <= expected_wait * 2 * 1.1
    assert len(probes) == 3 and w.quarantined == ["r0", "r1"]  # one run per probe; no quarantine while paused
    assert [store.get_run(f"r{i}").consecutive_failures for i in range(2, 5)] == [2, 2, 2]
    w.app.default = SUCCESS
    w.clock.now = parse_utc(store.get_outage().next_probe_at) + timedelta(minutes=15)
    assert sorted(w.tick_after()) == ["r2", "r3", "r4"]  # the probe got through, then the rest in the same tick
    assert w.outages == [True, False] and not store.get_outage().paused
    assert [store.get_run(f"r{i}").status for i in range(2, 5)] == ["finished"] * 3


def test_a_bad_key_is_not_an_outage_and_its_runs_are_left_alone(store: RunStore):
    for i in range(5):
        interrupted_run(store, f"r{i}")
    w = Watched(store)
    w.app.default = AUTH
    assert w.tick_after() == [f"r{i}" for i in range(5)]
    assert w.outages == [] and not store.get_outage().paused and store.get_outage().failures == 0
    assert {store.get_run(f"r{i}").status for i in range(5)} == {"failed"}
    assert w.tick_after(1000) == []


def test_while_one_replica_probes_another_does_not(store: RunStore, open_more: Callable[..., RunStore]):
    for i in range(3):
        interrupted_run(store, f"r{i}")
    for _ in range(3):
        failure(store, T0 - timedelta(days=3650))  # an outage, its first probe long due
    inside, go = threading.Event(), threading.Event()
    store_a, store_b = open_more(), open_more()

    def blocking(run_id: str, epoch: int) -> None:
        with durable.resume(store_a, run_id, epoch=epoch) as run:
            inside.set()
            go.wait(30)
            run.finish("ok")

    clock = FakeClock()
    loop_a = RecoveryLoop(store_a, blocking, clock=clock, owner="loop-a")
    loop_b = RecoveryLoop(store_b, ScriptedApp(store_b, clock), clock=clock, owner="loop-b")
    thread = threading.Thread(target=loop_a.tick)
    thread.start()
    try:
        assert inside.wait(30)
        report = loop_b.tick()
        assert report.attempted == [] and report.paused and "outage-wait" in report.rules()
        assert store.get_outage().probe_owner == "loop-a"
    finally:
        go.set()
        thread.join(30)
    assert not store.get_outage().paused  # loop A's probe got through, and loop A did the rest
    assert {run.status for run in store.list_runs()} == {"finished"}


# --- through the reference agent and the scripted model server ---


class AgentApp:
    """The reference agent as a recover app: resume the run at the loop's epoch and execute it."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def resume(self, run_id: str, epoch: int) -> None:
        self.agent.run_turn(durable.resume(self.agent.store, run_id, epoch=epoch))


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(EXAMPLE / "model.py", seed=3) as server:
        yield server


def start_failing_runs(agent: Agent, model: ScriptedModelServer, count: int) -> list[str]:
    """``count`` runs cut short by a 503 on their first model call: interrupted, retryable."""
    model.inject(Fault.status(503), times=count)
    ids = [f"sum-{i}" for i in range(count)]
    for run_id in ids:
        with pytest.raises(ProviderError):
            agent.send(f"add {run_id[-1]} 10", run_id=run_id)
    return ids


@pytest.fixture
def agent(store: RunStore, model: ScriptedModelServer, tmp_path: Path) -> Agent:
    directory = agent_directory.load(copy_example(tmp_path / "agent"))
    return Agent(directory, ModelConfig(model.url, "scripted").client({}), store, model_name="scripted")


def test_a_provider_outage_through_the_real_agent_pauses_probes_and_finishes_every_run(
        agent: Agent, model: ScriptedModelServer, store: RunStore):
    ids = start_failing_runs(agent, model, 4)
    assert {store.get_run(r).status for r in ids} == {"interrupted"}
    # Each run failed once already; two failures before the pause make two of them 2 of 3: had the probes'
    # failures counted, the third probe (on one of those two) would have quarantined it.
    w = Watched(store, max_attempts=3)
    w.loop.resume = AgentApp(agent).resume
    model.inject(Fault.status(503), times=3 + 3)  # three runs meet it, then three probes
    assert len(w.tick_after()) == 3 and w.outages == [True]
    probed = []
    for _ in range(3):  # the provider is still down at the first three probes
        w.clock.now = parse_utc(store.get_outage().next_probe_at)
        probed += w.tick_after()
        assert store.get_outage().paused
    assert len(probed) == 3 and w.quarantined == []
    w.clock.now = parse_utc(store.get_outage().next_probe_at) + timedelta(minutes=15)
    assert sorted(w.tick_after()) == ids  # back up: the probe gets through, and the rest follow in the same tick
    assert w.outages == [True, False] and w.quarantined == []
    for run in (store.get_run(r) for r in ids):
        assert run.status == "finished" and run.output["text"].startswith("The sum is"), run
    assert [r["status"] for r in model.requests].count(503) == 4 + 3 + 3


def test_a_bad_key_through_the_real_agent_is_no_outage_and_its_runs_are_left_alone(
        agent: Agent, model: ScriptedModelServer, store: RunStore):
    ids = start_failing_runs(agent, model, 4)
    w = Watched(store)
    w.loop.resume = AgentApp(agent).resume
    model.inject(Fault.status(401), times=4)
    assert w.tick_after() == ids  # four failures in a row, none an outage
    assert w.outages == [] and not store.get_outage().paused
    for run_id in ids:
        run = store.get_run(run_id)
        assert (run.status, run.last_error["category"], run.last_error["retryable"]) == (
            "failed", "auth-failure", False)
    assert w.tick_after(1000) == [] and len(model.requests) == 8  # left alone: no request after the 401s
