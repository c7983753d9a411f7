"""LlamaIndex's ``FunctionAgent`` at its defaults, traced by openinference-instrumentation-llama-index, makes one run
per ``agent.run`` in lousho: the plan's 20 questions, the declared name, the question and the answer as text.

The agent (llamaindex/weather_agent.py) runs in a venv of its own, ``.venv-llamaindex`` (``make agent-venvs``;
``LOUSHO_LLAMAINDEX_PYTHON`` names another interpreter): LlamaIndex needs ``openai<3``, lousho's dev extras
``openai`` 3, so a user's LlamaIndex agent never shares lousho's environment either.

What LlamaIndex (llama-index-core 0.14, llama-index-llms-openai 0.8) does at its defaults, which the test relies on:

* ``OpenAI`` speaks chat completions, and ``FunctionAgent`` streams them (``streaming=True``: the LLM spans are
  ``OpenAI.astream_chat``), without ``stream_options``, so its spans carry no token counts.
* A tool's exception goes back to the model as the tool's result (``BaseWorkflowAgent._call_tool`` returns a
  ``ToolOutput`` with ``is_error``): the model apologises and the run is ok; the tool's span ended in ERROR is a
  handled error (``Expect.tool_error_handled``).
* A 500 is retried by the ``openai`` client (``max_retries=3``: four requests under one LLM span; LlamaIndex's own
  tenacity retry wraps only the creation of the stream); then ``agent.run`` raises ``openai.InternalServerError``
  and the run fails after two model calls, the second failed.

What lousho reads from its spans (docs/observe.md, "What makes a run"): no span carries ``agent.name``; the
declared name is in the workflow's events (``current_agent_name='weather-agent'`` in a step's input), so the run's
agent is the declared name (without it, lousho would show the class from the root span "FunctionAgent.run").
The root's output is llama-index-workflows' 200-character summary ``StopEvent(result=...``, so the output is the
last model call's answer; the ``OpenAI._prepare_chat_with_tools`` LLM span beside each call is not a request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from daemon_support import sql
from frameworks_support import HERE, MODEL, RUNS, SYSTEM, Expect, check_runs, question, run_agent, weather_model

__all__ = ["weather_model"]  # the fixture, used by name

ROOT = HERE.parents[1]
AGENT_PROGRAM = HERE / "llamaindex" / "weather_agent.py"
NAME = "weather-agent"  # FunctionAgent(name=...)
EXPECT = Expect(tool_error_handled=True)


def agent_python() -> Path:
    """The interpreter of the agent's own venv; a missing one fails the test (it is part of `make test`)."""
    override = os.environ.get("LOUSHO_LLAMAINDEX_PYTHON")
    python = Path(override) if override else ROOT / ".venv-llamaindex" / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} does not exist: run `make agent-venvs` (the LlamaIndex agent needs a venv of its "
                    f"own, LlamaIndex needs openai<3), or set LOUSHO_LLAMAINDEX_PYTHON to a Python that has "
                    f"tests/frameworks/llamaindex/requirements.txt")
    return python


@pytest.mark.system
@pytest.mark.slow
def test_a_llamaindex_function_agent_at_its_defaults_gives_a_run_per_question(shared_daemon, weather_model) -> None:
    plan = {"agent": NAME, "model": MODEL, "system": SYSTEM, "questions": [question(i) for i in range(RUNS)]}
    run_agent([str(agent_python()), str(AGENT_PROGRAM), shared_daemon.url, weather_model.url, json.dumps(plan)])
    runs = check_runs(shared_daemon.url, NAME, EXPECT)
    # At its defaults the agent streams: every model call (two per run) is a streamed one.
    [streamed] = sql(shared_daemon.url, "SELECT count(*) AS n FROM spans WHERE name = 'OpenAI.astream_chat' "
                     "AND trace_id IN (SELECT unnest(?))", [[run["last_trace_id"] for run in runs]])
    assert streamed["n"] == 2 * RUNS
