"""A revision for every run, and a handled tool error is not a failed run: real instrumentations (OpenInference,
Pydantic AI) drive the real openai client against the scripted model, exporting OTLP to a daemon child, with no
``lousho.*`` attribute and no ``gen_ai.agent.version``.

A changed system prompt is a new derived revision (``auto:``) that the monitor and the daemon's trigger watch
against the one before; runs with nothing to fingerprint are one unversioned revision that still gives cases;
a tool error the agent handled leaves its run ok, counted in ``handled_errors``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from daemon_support import sql
from genai_support import drive, lousho, model, wait_for_runs  # noqa: F401 (model is a fixture)

from lousho.analysis.cases import cases_from_failures
from lousho.analysis.live_monitor import Monitor
from lousho.observe.client.process import start_daemon
from lousho.observe.client.store_client import connect


def steps(n: int, verdict: str, tag: str) -> list[dict]:
    return [{"input": f"what is the weather in {tag}{i}?", "verdict": verdict} for i in range(n)]


def started(directory: Path) -> list[dict]:
    path = directory / ".lousho" / "trigger.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["action"] == "started"]


@pytest.mark.system
@pytest.mark.slow
@pytest.mark.parametrize("instrumentation", ["pydantic-ai"])
def test_a_changed_system_prompt_is_a_new_derived_revision_the_monitor_and_the_trigger_watch(
        tmp_path, model, instrumentation):  # noqa: F811
    dirs = {}
    for name in ("worse", "same"):
        dirs[name] = tmp_path / name
        dirs[name].mkdir()
        (dirs[name] / "instructions.md").write_text("Answer tersely.\n")
    (tmp_path / "check.py").write_text("def check(case, output):\n    return None\n")
    agents = [a for name in dirs for a in ("--agent", f"{name}={dirs[name]}:{tmp_path / 'check.py'}")]
    # 20 runs a revision: the window rule, which watches a new revision against the 20 runs before it (the
    # CUSUM does the same from a 1,000-run reference: test_trigger_cusum.py).
    daemon = start_daemon(tmp_path / "o.duckdb", *agents, "--trigger", "seed", "--trigger-interval", "0.1",
                          env={"LOUSHO_IMPROVE": "on"})
    try:
        for agent, second in (("worse", "fail"), ("same", "pass")):
            drive(tmp_path, model, daemon, instrumentation, steps(20, "pass", "A"), "--agent", agent,
                  "--system", "You are a weather assistant.")
            applied_at = datetime.now(UTC)
            drive(tmp_path, model, daemon, instrumentation, steps(20, second, "B"), "--agent", agent,
                  "--system", "You are a terse weather assistant.")
            runs = wait_for_runs(daemon.url, agent, 40)
            assert len(runs) == 40
            first, then = runs[0]["harness_revision"], runs[-1]["harness_revision"]
            assert first.startswith("auto:") and then.startswith("auto:") and first != then
            assert [r["harness_revision"] for r in runs] == [first] * 20 + [then] * 20
            assert {r["revision_source"] for r in runs} == {"derived"}
            decision = Monitor(connect(daemon.url), agent, first, then, applied_at).check()
            assert (decision.action == "rollback") == (second == "fail"), decision.reason
        # `lousho improve status` names the derived revisions of the agent's runs, newest first.
        shown = lousho("improve", "status", str(dirs["worse"]), "--observe", daemon.url, "--json")
        assert shown.returncode == 0, shown.stderr
        assert [(r["revision"], r["source"], r["runs"], r["failed"]) for r in json.loads(shown.stdout)["runs"]] == [
            (then, "derived", 20, 20), (first, "derived", 20, 0)]
        shown = lousho("improve", "status", str(dirs["worse"]), "--observe", daemon.url)
        assert f"runs         {then}  derived (fingerprint of its instructions, tools and model)  20 runs, " \
               "20 failed" in shown.stdout, shown.stdout
        deadline = time.monotonic() + 30
        while not started(dirs["worse"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        [fired] = started(dirs["worse"])
        assert fired["revision"] == sql(daemon.url, "SELECT harness_revision AS r FROM runs WHERE agent = 'worse' "
                                        "ORDER BY started_ns DESC LIMIT 1")[0]["r"]
        assert (fired["before_passes"], fired["recent_passes"]) == (20, 0)
        time.sleep(1)  # many more looks at the healthy agent
        assert started(dirs["same"]) == []
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


@pytest.mark.system
def test_runs_with_nothing_to_fingerprint_are_one_unversioned_revision_with_cases(
        tmp_path, model, shared_daemon):  # noqa: F811
    # An agent with no system prompt and no tools: nothing to derive a revision from.
    plan = [{"input": "hello", "verdict": "pass"}, {"input": "hello again", "verdict": "fail"}]
    drive(tmp_path, model, shared_daemon, "openinference", plan, "--no-tools", "--agent", "unversioned")
    runs = wait_for_runs(shared_daemon.url, "unversioned", 2)
    assert len(runs) == 2
    cases = cases_from_failures(connect(shared_daemon.url), "unversioned")
    assert cases["input"].to_list() == ["hello again"]
    assert all(r["harness_revision"] is None and r["revision_source"] == "none" for r in runs), runs


@pytest.mark.system
@pytest.mark.parametrize("instrumentation,root", [("openinference", "agent"), ("openinference", "chain"),
                                                  ("pydantic-ai", "agent")])
def test_a_tool_error_the_agent_handled_leaves_its_run_ok(tmp_path, model, shared_daemon, instrumentation, root):  # noqa: F811
    agent = f"handled-{instrumentation}-{root}"
    plan = [{"input": "what is the weather in Oslo?", "verdict": None, "tool_error": True},
            {"input": "fault: weather in Rome?", "verdict": None}]
    drive(tmp_path, model, shared_daemon, instrumentation, plan, "--agent", agent, "--service", agent,
          "--root", root, "--system", "You are a weather assistant.")
    runs = wait_for_runs(shared_daemon.url, agent, 2)
    assert [(r["input"], r["status"]) for r in runs] == [(plan[0]["input"], "ok"), (plan[1]["input"], "error")]
    assert runs[0]["handled_errors"] >= 1 and runs[1]["handled_errors"] == 0
    # The handled error is its span's, not the run's: an ok run has no error type or message.
    assert runs[0]["error_type"] is None and runs[0]["error_message"] is None
    # Its system prompt and tools make its revision (OpenInference sends them as llm.input_messages, llm.tools).
    assert runs[0]["harness_revision"] == runs[1]["harness_revision"]
    assert runs[0]["harness_revision"].startswith("auto:") and runs[0]["revision_source"] == "derived"
    errors = sql(shared_daemon.url, "SELECT count(*) AS n FROM spans WHERE trace_id = ? AND status_code = 'ERROR'",
                 [runs[0]["last_trace_id"]])
    assert errors[0]["n"] == runs[0]["handled_errors"]
