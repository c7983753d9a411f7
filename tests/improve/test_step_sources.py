"""Where a step's cases and evidence come from, and what a probe may touch.

Cases from failed runs in the observe store (live revision only), recoveries as untrusted evidence
(never gate runs, never from a held-out case), and the shadow hook that keeps tools from running.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from improve_support import ADD_FIX, HELD_OUT, HELD_OUT_SECRET, agent_policy, editor_script, make_agent
from test_step import step

from lousho.agent.loop import RunOptions
from lousho.agent.runner import AgentSetup, open_agent
from lousho.improve import StepOptions, improve_agent
from lousho.improve.records import Recovery
from lousho.models.config import ModelConfig
from lousho.models.scripted import ScriptedModelServer
from lousho.observe.client.process import DaemonProcess


@pytest.mark.system
def test_cases_come_from_failed_runs_of_the_live_revision(tmp_path: Path, daemon: DaemonProcess,
                                                          agent_model: ModelConfig) -> None:
    agent, check = make_agent(tmp_path, cases=HELD_OUT)  # the module gives only a held-out case
    setup = AgentSetup(agent, agent_model, f"sqlite:///{tmp_path / 'runs.db'}", daemon.url, check_path=check,
                       batch_export=True)
    with open_agent(setup, {}) as runner:
        for text in ("add 2 3 4", "add 2 3 4", "add 10 20 5", "note: a, b"):
            runner.send(text, options=RunOptions(case_id=text.replace(" ", "-")))
    with ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as editor:
        result = improve_agent(agent, check, StepOptions(model=agent_model, editor_model=ModelConfig(editor.url, "e"),
                                                           observe=daemon.url))
        sent = json.dumps([r["messages"] for r in editor.requests])
    assert result.outcome == "proposal", result.reason
    search = next(d for d in result.decisions if d.kind == "search")
    assert set(search.evidence) == {"training case 1", "training case 2"}  # the two failing add cases
    assert "add 10 20 5" in sent and HELD_OUT_SECRET not in sent
    recurring = improve_agent(agent, check, StepOptions(model=agent_model, editor_model=ModelConfig(editor.url, "e"),
                                                      observe=daemon.url, recurring_only=True))
    assert set(next(d for d in recurring.decisions if d.kind == "search").evidence) == {"training case 1"}


def test_recoveries_are_untrusted_evidence_and_never_of_a_held_out_case(tmp_path: Path,
                                                                        agent_model: ModelConfig) -> None:
    recoveries = [Recovery("add-a", "add 2 3 4", "The sum is 10.", "wrong sum", "retry: use the tool", "The sum is 9."),
                  Recovery("notes", f"note: {HELD_OUT_SECRET}, beta", "ok", None, "retry", "saved 2 notes"),
                  # A live run without a case id is keyed by its input's hash: the same held-out input.
                  Recovery("input:0f3a", f"note: {HELD_OUT_SECRET}, beta", "ok", None, "retry", "saved 2 notes")]
    result, requests = step(tmp_path, agent_model, {"invariant": [ADD_FIX]}, recoveries=recoveries)
    first = requests[0]["messages"][1]["content"]
    assert "recovery 1" in first and "retry: use the tool" in first
    assert HELD_OUT_SECRET not in json.dumps([r["messages"] for r in requests])
    assert "recovery 2" not in first
    gate = next(d for d in result.decisions if d.kind == "gate")
    assert all(row["runs"] == 3 for row in gate.evidence["rows"]), "gate rows are fresh runs only"


def test_the_shadow_hook_keeps_tools_that_are_not_read_only_from_running(tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    for read_only, expect_effects in ((None, True), (["add", "lookup"], False)):
        agent, check = make_agent(tmp_path / str(bool(read_only)))
        tools = (agent / "tools.py").read_text().replace('ctx.agent_dir / "workspace"', f"Path({str(tmp_path)!r})")
        (agent / "tools.py").write_text("from pathlib import Path\n" + tools.replace("notes.txt", "effects.txt"))
        if read_only is not None:
            check.write_text(check.read_text() + f"\nread_only = {read_only!r}\n")
        effects.unlink(missing_ok=True)
        with ScriptedModelServer(agent_policy) as model, \
                ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as editor:
            result = improve_agent(agent, check, StepOptions(model=ModelConfig(model.url, "agent"),
                                                               editor_model=ModelConfig(editor.url, "e")))
        assert result.outcome == "proposal", result.reason
        assert effects.exists() is expect_effects


@pytest.mark.system
def test_a_check_module_case_and_a_live_case_with_the_same_id_are_two_cases(tmp_path: Path, daemon: DaemonProcess,
                                                                          agent_model: ModelConfig) -> None:
    # The module's case "add-a" and a live failure recorded under the case id "add-a" hold different inputs:
    # two cases, each run three times, never one case with six runs.
    agent, check = make_agent(tmp_path, cases=[{"id": "add-a", "input": "add 1 1 1"}, *HELD_OUT])
    setup = AgentSetup(agent, agent_model, f"sqlite:///{tmp_path / 'runs.db'}", daemon.url, check_path=check,
                       batch_export=True)
    with open_agent(setup, {}) as runner:
        runner.send("add 10 20 5", options=RunOptions(case_id="add-a"))
    with ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as editor:
        result = improve_agent(agent, check, StepOptions(model=agent_model, editor_model=ModelConfig(editor.url, "e"),
                                                           observe=daemon.url))
    assert result.outcome == "proposal", result.reason
    search = next(d for d in result.decisions if d.kind == "search")
    assert search.evidence == {"training case 1": "0/3", "training case 2": "0/3"}
    assert sorted(c.input for c in result.training) == ["add 1 1 1", "add 10 20 5"]
    assert len({c.id for c in result.training}) == 2
    gate = next(d for d in result.decisions if d.kind == "gate")
    assert all(row["runs"] == 3 and row["base"] <= 3 for row in gate.evidence["rows"])
