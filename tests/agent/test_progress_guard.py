"""The progress guard end to end: hint, denials, then a stop with LOUSHO_RUN_NO_PROGRESS that no resume undoes."""

from __future__ import annotations

import json

import pytest
from agent_support import copy_example, lousho
from daemon_support import sql

from lousho.agent import load
from lousho.agent.hooks import ToolCallInfo
from lousho.agent.loop import Agent
from lousho.agent.progress import output_check, progress_guard
from lousho.models.client import ChatClient
from lousho.models.scripted import ScriptedModelServer
from lousho.recover import durable
from lousho.recover import store as run_store
from lousho.recover.errors import RunNotResumable

FAILING_TOOLS = '''
from lousho.agent import tool


@tool("Fetch a URL.")
def fetch(url: str) -> str:
    raise ConnectionError(f"host unreachable: {url}")
'''


def stubborn(request):
    """A model that calls the same failing tool forever, whatever it is told."""
    return {"tool_calls": [{"name": "fetch", "arguments": {"url": "http://10.9.9.9/data"}}]}


@pytest.mark.system
def test_guard_hints_then_denies_then_stops_the_run_for_good(tmp_path, daemon):
    agent_dir = copy_example(tmp_path / "agent", tools=FAILING_TOOLS)
    (agent_dir / "agent.toml").write_text('name = "fetcher"\nmax_steps = 10\nprogress_guard = 3\n')
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    with ScriptedModelServer(stubborn) as model:
        result = lousho("agent", "run", str(agent_dir), "get the data", "--run-id", "stuck", "--model-url",
                        model.url, "--model", "m", "--store", store, "--observe", daemon.url, "--json")
        shown = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["finish_reason"] == "stopped"
    assert out["error"]["code"] == "LOUSHO_RUN_NO_PROGRESS" and out["error"]["retryable"] is False

    # What the model saw: a failure, the same failure with a hint, then three denials.
    assert shown[0].startswith("error: ConnectionError: host unreachable")
    assert "[hint] fetch has now failed 2 times" in shown[1]
    assert [s.startswith("denied by progress-guard:") for s in shown[2:]] == [True, True, True]
    assert len(shown) == 5  # the sixth call was not answered: the run stopped there

    saved = run_store.open(store)
    record = saved.get_run("stuck")
    assert record.status == "stopped"
    assert record.last_error["code"] == "LOUSHO_RUN_NO_PROGRESS" and record.last_error["retryable"] is False
    with pytest.raises(RunNotResumable):
        durable.resume(saved, "stuck")

    actions = sql(daemon.url, """
        SELECT e->>'$.attributes."heal.kind"' AS kind, s.status_code, s.error_type,
               s.attributes->>'lousho.tool.replaced_by_hook' AS replaced_by
        FROM spans s, unnest(CAST(s.events AS JSON[])) AS u(e)
        WHERE s.run_id = 'stuck' AND e->>'name' = 'heal.action' ORDER BY s.start_ns""")
    assert [a["kind"] for a in actions] == ["hint", "deny", "deny", "deny", "stop"]
    assert actions[0]["replaced_by"] == "progress-guard"
    assert all(a["status_code"] == "ERROR" for a in actions[1:])  # a denial is the span's error
    via_cli = lousho("sql", "--url", daemon.url, "--json",
                     "SELECT count(*) AS n FROM spans WHERE run_id = 'stuck' AND events LIKE '%heal.action%'")
    assert json.loads(via_cli.stdout) == [{"n": 5}]


@pytest.mark.system
def test_output_check_turns_a_wrong_result_into_a_failure_the_guard_counts(tmp_path):
    def always_add(request):
        return {"tool_calls": [{"name": "add", "arguments": {"numbers": [2, 2]}}]}

    def negative_sums(call: ToolCallInfo, result) -> str | None:
        return "the sum of positive numbers cannot be below 5" if float(result) < 5 else None

    agent_dir = copy_example(tmp_path / "agent")
    with ScriptedModelServer(always_add) as model:
        agent = Agent(load(agent_dir), ChatClient(model.url, "m"), run_store.open(f"sqlite:///{tmp_path / 'r.db'}"),
                      hooks=[output_check(negative_sums), progress_guard(max_denials=1)])
        result = agent.send("add 2 2")
        shown = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert shown[0].startswith("error: output check failed: the sum of positive numbers cannot be below 5")
    assert "[hint]" in shown[1]
    assert shown[2].startswith("denied by progress-guard")
    assert result.finish_reason == "stopped" and result.error["code"] == "LOUSHO_RUN_NO_PROGRESS"


def test_guard_needs_a_sane_limit():
    with pytest.raises(ValueError):
        progress_guard(max_denials=-1)
    assert isinstance(output_check(lambda c, r: None).post_tool_call(
        ToolCallInfo("r", "c", "t", {}, ()), "fine"), type(None))
