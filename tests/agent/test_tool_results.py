"""A tool's result that JSON cannot hold below its top level (a datetime in a dict, a NaN) is shown to the model
as text, as a top-level one is: the run goes on, instead of failing for good after the tool's side effect ran."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import copy_example

from lousho.agent import load
from lousho.agent.loop import Agent
from lousho.models.client import ChatClient
from lousho.models.scripted import ScriptedModelServer
from lousho.recover import store as run_store

TOOLS = '''
import math
from datetime import UTC, datetime
from lousho.agent import ToolContext, tool


@tool("Book a slot and say when.")
def book(what: str, ctx: ToolContext) -> dict:
    with (ctx.agent_dir / "booked.txt").open("a") as f:
        f.write(what + "\\n")
    if what == "nan":
        return {"score": math.nan}
    return {"booked": what, "at": datetime(2026, 12, 2, 22, 0, tzinfo=UTC)}
'''

SCRIPT = '''
def respond(request):
    done = [m for m in request.messages if m.get("role") == "tool"]
    if not done:
        return {"tool_calls": [{"name": "book", "arguments": {"what": request.last_user}}]}
    return "done: " + done[-1]["content"]
'''


@pytest.mark.system
@pytest.mark.parametrize("what", ["room", "nan"])
def test_a_tool_result_with_a_value_json_cannot_hold_is_shown_as_text_and_the_run_finishes(tmp_path: Path, what):
    agent_dir = copy_example(tmp_path / "agent", tools=TOOLS)
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    store = run_store.open(f"sqlite:///{tmp_path / 'runs.db'}")
    with ScriptedModelServer(script) as model:
        agent = Agent(load(agent_dir), ChatClient(model.url, "scripted"), store, model_name="scripted")
        result = agent.send(what, run_id="r1")
    assert result.finish_reason == "stop", result
    assert (agent_dir / "booked.txt").read_text().splitlines() == [what]  # the tool ran once
    run = store.get_run("r1")
    assert run is not None and run.status == "finished"
    recorded = store.load_steps("r1")[1]
    assert recorded.name == "tool:book" and isinstance(recorded.output, str)
    assert ("2026-12-02" in recorded.output) if what == "room" else ("NaN" in recorded.output)
    store.close()
