"""The provider's Retry-After bounds the recover loop: a run is not resumed, and an outage not probed, before the
provider said it may be. Driven through the reference agent and the scripted model server over HTTP, so the
header travels the whole way: scripted server -> the openai SDK client -> ProviderError -> the stored last_error
-> the loop's backoff. The loop's clock is fake; its base interval (1 s) asks for far less than the provider."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_loop_support import FakeClock

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


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(EXAMPLE / "model.py", seed=3) as server:
        yield server


@pytest.fixture
def agent(store: RunStore, model: ScriptedModelServer, tmp_path: Path) -> Agent:
    directory = agent_directory.load(copy_example(tmp_path / "agent"))
    return Agent(directory, ModelConfig(model.url, "scripted").client({}), store, model_name="scripted")


def loop_over(store: RunStore, agent: Agent, clock: FakeClock, outages: list[bool]) -> RecoveryLoop:
    def resume(run_id: str, epoch: int) -> None:
        agent.run_turn(durable.resume(agent.store, run_id, epoch=epoch))

    return RecoveryLoop(store, resume, RecoverSettings(interval=1.0, max_attempts=10), clock=clock,
                        on_outage=outages.append)


def interrupted(agent: Agent, model: ScriptedModelServer, run_ids: list[str]) -> None:
    model.inject(Fault.status(503), times=len(run_ids))
    for run_id in run_ids:
        with pytest.raises(ProviderError):
            agent.send(f"add {run_id[-1]} 10", run_id=run_id)


def test_a_429_with_retry_after_7_is_not_resumed_before_7_seconds_and_counts_towards_an_outage(
        agent: Agent, model: ScriptedModelServer, store: RunStore):
    interrupted(agent, model, ["sum-1"])
    clock, outages = FakeClock(), []
    loop = loop_over(store, agent, clock, outages)
    model.inject(Fault.rate_limit(retry_after=7), times=1)
    start = clock.now
    assert loop.tick().attempted == ["sum-1"]
    run = store.get_run("sum-1")
    assert (run.last_error["category"], run.last_error["code"], run.last_error["retry_after"]) == (
        "rate-limit", "LOUSHO_PROVIDER_RATE_LIMIT", 7.0)
    # The interval's backoff alone would have allowed a retry after 2-2.2 s.
    assert (parse_utc(run.next_attempt_at) - start).total_seconds() >= 7
    # A rate limit is a provider failure (the taxonomy): one towards the breaker's three, no pause yet.
    assert (store.get_outage().failures, outages) == (1, [])
    for elapsed in (1, 3, 5, 6.9):
        clock.now = start + _s(elapsed)
        assert loop.tick().attempted == [], f"resumed {elapsed} s after a Retry-After of 7 s"
    clock.now = start + _s(7.01)
    assert loop.tick().attempted == ["sum-1"]
    assert store.get_run("sum-1").status == "finished"
    assert store.get_outage().failures == 0


def test_an_outage_opened_by_rate_limits_is_not_probed_before_the_providers_retry_after(
        agent: Agent, model: ScriptedModelServer, store: RunStore):
    ids = ["sum-1", "sum-2", "sum-3"]
    interrupted(agent, model, ids)
    clock, outages = FakeClock(), []
    loop = loop_over(store, agent, clock, outages)
    model.inject(Fault.rate_limit(retry_after=40), times=4)  # the three runs, then the first probe
    start = clock.now
    assert loop.tick().attempted == ids
    state = store.get_outage()
    assert outages == [True] and state.paused and state.last_error["retry_after"] == 40.0
    assert (parse_utc(state.next_probe_at) - start).total_seconds() >= 40  # the interval alone: 1-1.1 s
    clock.now = start + _s(39)
    assert loop.tick().attempted == []
    clock.now = start + _s(40.5)
    assert len(loop.tick().attempted) == 1  # the probe, refused again with Retry-After: 40
    probe_at = clock.now
    assert (parse_utc(store.get_outage().next_probe_at) - probe_at).total_seconds() >= 40


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)
