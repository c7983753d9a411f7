"""What every framework test shares: the plan of 20 runs with 6 planted failures, the scripted model, the
agent's tool, and the checks of the runs the daemon made of the framework's traces.

Not a conftest.py: test modules import the helpers by name (and the ``weather_model`` fixture).

The plan: runs 3, 9 and 15 ask about "Atlantis-N", where the tool raises (``NoStationError``); runs 6, 12 and 18
ask about "Faultville-N", where the provider answers 500 after the tool. What the framework does with the tool's
exception at its defaults decides the run: raised, the run fails with that error; handed back to the model, the
model apologises and the run is ok with a handled error (docs/observe.md, "Handled errors").
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from daemon_support import sql

from lousho.analysis.cases import cases_from_failures
from lousho.analysis.outages import provider_marks
from lousho.models.process import ScriptedProcess, start_scripted
from lousho.observe.client.store_client import connect

HERE = Path(__file__).parent
RUNS = 20
TOOL_FAILS = (3, 9, 15)
PROVIDER_FAILS = (6, 12, 18)
MODEL = "gpt-4o-mini"
SYSTEM = "You answer questions about the weather. Use the get_weather tool."


class NoStationError(LookupError):
    pass


def city(i: int) -> str:
    if i in TOOL_FAILS:
        return f"Atlantis-{i}"
    if i in PROVIDER_FAILS:
        return f"Faultville-{i}"
    return f"Paris-{i}"


def question(i: int) -> str:
    return f"What is the weather in {city(i)}?"


def get_weather(city: str) -> str:
    """The agent's tool, in every Python framework test."""
    if city.startswith("Atlantis"):
        raise NoStationError(f"no station in {city}")
    return f"sunny in {city}"


def answer(i: int, tool_error_handled: bool) -> str | None:
    """The final answer text of run i (None: the run has none)."""
    if i in PROVIDER_FAILS or (i in TOOL_FAILS and not tool_error_handled):
        return None
    if i in TOOL_FAILS:
        return f"Sorry, I could not get the weather for {city(i)}."
    return f"The weather in {city(i)}: sunny in {city(i)}."


@pytest.fixture(scope="module")
def weather_model() -> Iterator[ScriptedProcess]:
    process = start_scripted(HERE / "frameworks_model.py")
    try:
        yield process
    finally:
        assert process.stop() == 0, "\n".join(process.output[-20:])


def run_agent(cmd: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done


def wait_for_runs(url: str, agent: str, n: int, timeout: float = 30.0) -> list[dict]:
    """The agent's runs, oldest first, once there are n (or the time is up). Waits a little longer so that a
    run too many would show."""
    deadline = time.monotonic() + timeout
    while True:
        rows = sql(url, "SELECT * FROM runs WHERE agent = ? ORDER BY started_ns", [agent])
        if len(rows) >= n or time.monotonic() > deadline:
            time.sleep(1.0)
            return sql(url, "SELECT * FROM runs WHERE agent = ? ORDER BY started_ns", [agent])
        time.sleep(0.1)


@dataclass(frozen=True)
class Expect:
    """What a framework does at its defaults."""

    tool_error_handled: bool  # the tool's exception goes back to the model
    tool_error_type: str = "NoStationError"  # error_type of a run the tool's exception ended
    provider_error_types: tuple[str, ...] = ("InternalServerError",)
    model_calls: int = 2  # per run that reached the second call
    tool_calls: int = 1
    # Model calls a provider-failed run shows beyond model_calls: the retries of the failed call when the
    # framework makes each one a model span of its own (the openai client's retries happen inside one span).
    retried_model_calls: int = 0


def check_runs(url: str, agent: str, expect: Expect) -> list[dict]:
    """The 20 runs of one framework's agent, each as it happened; then the cases the loop learns from."""
    runs = wait_for_runs(url, agent, RUNS)
    assert len(runs) == RUNS, [(r["run_id"], r["input"]) for r in runs]
    assert [r["input"] for r in runs] == [question(i) for i in range(RUNS)]
    failed = {i for i in PROVIDER_FAILS} | (set() if expect.tool_error_handled else set(TOOL_FAILS))
    for i, run in enumerate(runs):
        where = f"run {i} ({run['input']}): {run}"
        assert run["agent"] == agent, where
        assert (run["status"] == "error") == (i in failed), where
        assert run["output"] == answer(i, expect.tool_error_handled), where
        # A run the tool's exception ended never reached the second call; a provider's 500s may be retried in
        # spans of their own (the Vercel AI SDK's attempts).
        calls = 1 if i in TOOL_FAILS and not expect.tool_error_handled else expect.model_calls
        retried = expect.retried_model_calls if i in PROVIDER_FAILS else 0
        assert run["model_calls"] == calls + retried, where
        assert run["tool_calls"] == expect.tool_calls, where
        assert run["model"] == MODEL, where
        # The system prompt, tools and model make one derived revision (no gen_ai.agent.version is sent).
        assert run["harness_revision"] == runs[0]["harness_revision"], where
        assert run["harness_revision"].startswith("auto:") and run["revision_source"] == "derived", where
        if i in PROVIDER_FAILS:
            assert (run["error_type"] or "").endswith(expect.provider_error_types), where
        elif i in TOOL_FAILS and not expect.tool_error_handled:
            assert (run["error_type"] or "").endswith(expect.tool_error_type), where
        elif i in TOOL_FAILS:
            assert run["handled_errors"] >= 1, where
        else:
            assert run["handled_errors"] == 0 and run["error_type"] is None, where
    # The monitor's outage rule (analysis/outages.py) reads the provider's 500s in these real traces: exactly the
    # runs the provider failed are marked, never a tool's error.
    store = connect(url)
    marked = provider_marks(store, store.sql("SELECT * FROM runs WHERE agent = ? ORDER BY started_ns", [agent]))
    assert [i for i, m in enumerate(marked) if m] == sorted(PROVIDER_FAILS)
    cases = cases_from_failures(connect(url), agent)
    assert sorted(cases["input"].to_list()) == sorted(question(i) for i in failed)
    assert set(cases["count"].to_list()) == {1}
    return runs
