"""LangGraph's prebuilt ReAct agent, at its defaults, traced by openinference-instrumentation-langchain into lousho.

The agent (tests/frameworks/langgraph/langgraph_agent.py, a child process) is built as the docs build one:
``langchain.agents.create_agent`` (LangGraph v1's docs point there; ``langgraph.prebuilt.create_react_agent`` is
deprecated since LangGraph 1.0 but is what most LangGraph code still calls, so it runs too), with
``ChatOpenAI(model="gpt-4o-mini", base_url=..., api_key="sk-test")``, ``system_prompt``/``prompt`` SYSTEM and the
plain function ``get_weather``. What the test relies on, as langchain-openai 1.7 and langgraph-prebuilt 1.1 do at
their defaults:

* the model is called over chat completions, not streamed (``ChatOpenAI`` takes the Responses API only for the
  models or parameters that need it, and streams on ``invoke`` only when asked); the openai client retries a 500
  twice, and LangChain records the three attempts as one model call;
* the ToolNode's default ``handle_tool_errors`` hands back only a tool-call validation error and re-raises
  any other exception: ``NoStationError`` ends the run, after one model call;
* langchain-openai re-raises the client's ``InternalServerError`` as its subclass ``OpenAIAPIError``.

The agent's name is the graph's ``name=``: OpenInference names the graph's root span after it and makes it an
AGENT span only because the name contains "agent". ``create_react_agent`` runs here as "forecaster", a name
without it, whose graph span is a CHAIN while each of its "agent" nodes is an AGENT span: lousho reads
LangGraph's run metadata (``ls_integration``, ``langgraph_node``) to take the graph, not a node, for the run and
its name for the agent's (docs/observe.md, "What makes a run").
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from frameworks_support import (
    PROVIDER_FAILS,
    RUNS,
    TOOL_FAILS,
    Expect,
    check_runs,
    weather_model,  # noqa: F401 - the fixture
)

AGENT = Path(__file__).parent / "langgraph" / "langgraph_agent.py"
EXPECT = Expect(
    # ToolNode(handle_tool_errors=_default_handle_tool_errors) re-raises every exception but a
    # ToolInvocationError (langgraph/prebuilt/tool_node.py): the tool's exception fails the run.
    tool_error_handled=False,
    # langchain_openai.chat_models.base.OpenAIAPIError(openai.InternalServerError, ModelAPIError).
    provider_error_types=("OpenAIAPIError",),
)
# builder -> the agent's name. The batches run at once: each spends most of its time importing LangChain and in
# the openai client's backoff before its retries.
BATCHES = {"create_agent": "weather-agent", "create_react_agent": "forecaster"}


@pytest.fixture(scope="module")
def batches(shared_daemon, weather_model) -> Iterator[dict[str, subprocess.Popen[str]]]:  # noqa: F811
    children = {builder: subprocess.Popen(
        [sys.executable, str(AGENT), "--builder", builder, "--name", name, "--model-url", weather_model.url,
         "--otlp", shared_daemon.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for builder, name in BATCHES.items()}
    try:
        yield children
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.communicate()


def finish(child: subprocess.Popen[str]) -> None:
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 0, stdout[-3000:] + stderr[-6000:]
    outcomes = [json.loads(line) for line in stdout.splitlines()]
    # The child went on after each failing run, and saw the failures the plan planted.
    assert [o["run"] for o in outcomes] == list(range(RUNS)), stdout
    assert {o["run"] for o in outcomes if "error" in o} == {*TOOL_FAILS, *PROVIDER_FAILS}, stdout


@pytest.mark.system
def test_create_agent_runs_are_the_agents_runs(shared_daemon, batches) -> None:
    finish(batches["create_agent"])
    check_runs(shared_daemon.url, "weather-agent", EXPECT)


@pytest.mark.system
def test_create_react_agent_named_without_agent_is_one_run_not_its_agent_node(shared_daemon, batches) -> None:
    finish(batches["create_react_agent"])
    check_runs(shared_daemon.url, "forecaster", EXPECT)
