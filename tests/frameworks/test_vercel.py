"""The Vercel AI SDK (npm ``ai`` 6, ``@ai-sdk/openai`` 3) at its defaults, traced by its own telemetry
(``experimental_telemetry``) and exported by the OpenTelemetry Node SDK over OTLP/HTTP: 20 runs of the weather
agent (vercel/agent.mjs, a Node child process) against the scripted model, 6 of them with a planted failure,
read back from the daemon as 20 runs. ``make node-frameworks`` installs the agent's packages from its
package-lock.json; ``ai`` 7 needs Node 22, so the lock holds the newest majors that run on Node 20.

What the SDK does at its defaults, which the expectations below follow:
- ``openai(model)`` calls the Responses API (``POST /v1/responses``); ``generateText`` does not stream;
- a tool's thrown error goes back to the model as a ``tool-error`` part (its message as the tool's output): the
  Atlantis runs are ok, with a handled error (the ``ai.toolCall`` span ends in ERROR);
- the SDK retries a failed request itself (``maxRetries`` 2, backing off 2 s then 4 s), each attempt an
  ``ai.generateText.doGenerate`` span of its own: a Faultville run makes 4 requests, 1 + 3 attempts at its
  second call, and raises ``AI_RetryError`` (``error.name``) once the retries are spent. The agent starts its next
  run while one waits out a back-off, as a Node service answering requests concurrently would, so the 6 s of
  back-off are not paid three times.
The agent's name is the telemetry's ``functionId``, sent as ``ai.telemetry.functionId`` on every span.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from frameworks_support import (  # noqa: F401 (weather_model is a fixture)
    MODEL,
    PROVIDER_FAILS,
    RUNS,
    SYSTEM,
    Expect,
    answer,
    check_runs,
    question,
    run_agent,
    weather_model,
)

HERE = Path(__file__).parent / "vercel"
AGENT = "weather-agent"  # the agent's experimental_telemetry.functionId


@pytest.mark.slow
@pytest.mark.system
def test_vercel_ai_sdk_runs_at_its_defaults(tmp_path, shared_daemon, weather_model) -> None:  # noqa: F811
    node = shutil.which("node")
    if node is None or not (HERE / "node_modules" / "ai").is_dir():
        pytest.fail(f"the Vercel AI SDK agent needs node and {HERE / 'node_modules'}: run `make node-frameworks`")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"system": SYSTEM, "model": MODEL, "questions": [question(i) for i in range(RUNS)]}))
    done = run_agent([node, str(HERE / "agent.mjs"), "--model-url", weather_model.url, "--otlp", shared_daemon.url,
                      "--plan", str(plan)])
    outcomes = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    # What the agent itself saw: the provider's 500 raised once the retries were spent, the tool's error did not.
    assert [o.get("raised") for o in outcomes] == [
        "AI_RetryError" if i in PROVIDER_FAILS else None for i in range(RUNS)], done.stdout
    assert [o.get("output") for o in outcomes] == [answer(i, tool_error_handled=True) for i in range(RUNS)]

    runs = check_runs(shared_daemon.url, AGENT, Expect(tool_error_handled=True, provider_error_types=("AI_RetryError",),
                                                       retried_model_calls=2))
    # The SDK's default provider for openai(model): the Responses API, as its spans name it (chat would be openai.chat).
    assert {run["provider"] for run in runs} == {"openai.responses"}
