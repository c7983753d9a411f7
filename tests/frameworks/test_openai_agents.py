"""The OpenAI Agents SDK at its defaults, traced by openinference-instrumentation-openai-agents: 20 runs of the
weather agent (openai_agents/openai_agents_weather.py, a child process) against the scripted model, 6 of them
with a planted failure, read back from the daemon as 20 runs.

What the SDK does at its defaults, which the expectations below follow:
- it calls the Responses API (``POST /v1/responses``), not streamed (``Runner.run_sync``);
- a tool's exception goes back to the model as the tool's result (the default ``failure_error_function``): the
  Atlantis runs are ok, with a handled error (the tool's span ends in ERROR);
- the openai client retries a 500 twice (``max_retries=2``) inside one model call, and the runner adds no
  retries of its own: a Faultville run is two model calls (the second failed) and raises
  ``openai.InternalServerError``.
The agent's name is ``Agent(name=...)``; the instrumentation sends it as ``agent.name`` on the agent's span,
under the SDK's trace span "Agent workflow".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from daemon_support import sql
from frameworks_support import (  # noqa: F401 (weather_model is a fixture)
    PROVIDER_FAILS,
    RUNS,
    Expect,
    answer,
    check_runs,
    run_agent,
    weather_model,
)

AGENT = Path(__file__).parent / "openai_agents" / "openai_agents_weather.py"
NAME = "weather-agent"  # Agent(name=...) in the agent program


@pytest.mark.slow
@pytest.mark.system
def test_openai_agents_runs_at_the_sdk_defaults(shared_daemon, weather_model) -> None:  # noqa: F811
    done = run_agent([sys.executable, str(AGENT), "--model-url", weather_model.url, "--otlp", shared_daemon.url])
    outcomes = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    # What the agent itself saw: the provider's 500 raised after the client's two retries, the tool's exception
    # did not raise.
    assert [(o.get("raised"), o["retries"]) for o in outcomes] == [
        ("InternalServerError", 2) if i in PROVIDER_FAILS else (None, 0) for i in range(RUNS)], done.stdout
    assert [o.get("output") for o in outcomes] == [answer(i, tool_error_handled=True) for i in range(RUNS)]

    runs = check_runs(shared_daemon.url, NAME, Expect(tool_error_handled=True))
    # The model calls that answered were Responses API calls (the SDK's default): their output is a response.
    traces = [r["last_trace_id"] for r in runs]
    answered = sql(shared_daemon.url, "SELECT attributes FROM spans WHERE operation = 'chat' "
                   "AND status_code <> 'ERROR' AND trace_id IN (SELECT unnest(?))", [traces])
    assert len(answered) == 2 * RUNS - len(PROVIDER_FAILS)
    assert {json.loads(json.loads(row["attributes"])["output.value"])["object"] for row in answered} == {"response"}
