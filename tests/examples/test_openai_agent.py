"""``make example`` as a test: an agent on the plain openai SDK, in its own processes, heals itself.

A real daemon (with --agent), ``lousho models serve-scripted`` over HTTP as the provider, the example agent
sending traffic in processes of its own: the daemon's trigger starts the cycle, the cycle applies the fix,
the monitor keeps it on live runs, the audit chain verifies, and nothing outside the harness changed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import lousho

EXAMPLE = Path(__file__).parents[2] / "examples" / "openai-agent"


def example_rule() -> str:
    """The fix the example's scripted editor writes (policy.RULE), loaded under a name of its own."""
    spec = importlib.util.spec_from_file_location("openai_agent_policy", EXAMPLE / "policy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RULE


def files(root: Path) -> dict[str, bytes]:
    """Every file of the agent outside its harness (and outside run state and bytecode)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "harness" not in p.relative_to(root).parts[:1]
            and not {".lousho", "__pycache__"} & set(p.parts)}


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.system
@pytest.mark.slow
def test_make_example_heals_the_regression_through_the_trigger_and_touches_only_the_harness(tmp_path: Path):
    done = subprocess.run([sys.executable, str(EXAMPLE / "demo.py"), "--dir", str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    agent_dir = tmp_path / "openai-agent"
    harness = agent_dir / "harness"
    steps = [line.split(".")[0] for line in done.stdout.splitlines() if line[:1].isdigit()]
    assert steps == [str(n) for n in range(1, 11)], done.stdout

    # The trigger started the cycle (a regression on the live revision), and the cycle applied the fix.
    trigger = jsonl(harness / ".lousho" / "trigger.jsonl")
    [started] = [r for r in trigger if r["action"] == "started"]
    [finished] = [r for r in trigger if r["action"] == "finished"]
    assert started["agent"] == "order-desk" and started["reason"].startswith("regression:")
    assert (finished["outcome"], finished["code"], finished["pid"]) == ("applied", None, started["pid"])
    before, after = started["revision"], lousho.harness_revision(harness)
    assert before != after and example_rule() in (harness / "instructions.md").read_text()

    # proposal -> canary -> apply -> guard, then the monitor's keep on live runs, all in one verified chain.
    actions = [(e["action"], e.get("passed"), e.get("decision")) for e in jsonl(harness / ".lousho" / "audit.jsonl")]
    assert ("canary", True, None) in actions and ("guard", True, None) in actions
    assert [a for a, _, _ in actions].index("apply") < actions.index(("monitor", None, "keep"))
    state = json.loads((harness / ".lousho" / "state.json").read_text())
    assert (state["watched"]["status"], state["watched"]["after"]) == ("kept", after)
    verify = subprocess.run([sys.executable, "-m", "lousho", "improve", "audit", str(harness), "--verify"],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and verify.stdout.startswith("audit: ok"), verify.stdout + verify.stderr

    # The live runs carry the revision `lousho improve revision` prints: the base's, then the fix's.
    runs = json.loads(subprocess.run(
        [sys.executable, "-m", "lousho", "runs", "--db", str(tmp_path / "observe.duckdb"), "--agent", "order-desk",
         "--limit", "1000", "--json"], capture_output=True, text=True, timeout=60, check=True).stdout)
    live = [r for r in runs if not r["probe"]]
    assert {r["harness_revision"] for r in live} == {before, after}
    assert sum(r["harness_revision"] == after and r["passed"] for r in live) == 60

    # Nothing outside the harness changed: not the agent's code, its check, its data; no side effect ran.
    assert files(agent_dir) == files(EXAMPLE)
    assert not (agent_dir / "outbox.jsonl").exists()


def _agent(prelude: str, *args: str) -> subprocess.CompletedProcess[str]:
    """agent.py as ``python agent.py ARGS`` runs it, after ``prelude`` (which may hide a package)."""
    code = (f"import runpy, sys\n{prelude}\nsys.argv = ['agent.py', *{list(args)!r}]\n"
            f"runpy.run_path({str(EXAMPLE / 'agent.py')!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=EXAMPLE)


def test_the_example_stops_with_a_message_when_its_instrumentation_cannot_be_imported() -> None:
    # As on an environment where the package is missing (or, like openai-v2 with today's openai, does not import).
    hidden = "sys.modules['opentelemetry.instrumentation.genai.openai'] = None"
    done = _agent(hidden, "--observe", "http://127.0.0.1:9", "ask", "where is A-1?")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "cannot import the OpenAI instrumentation (opentelemetry.instrumentation.genai.openai)" in done.stderr
    assert "pip install opentelemetry-instrumentation-genai-openai" in done.stderr
    assert "--no-instrumentation" in done.stderr and "Traceback" not in done.stderr


def test_the_instrumentation_the_example_names_imports_with_the_openai_we_depend_on() -> None:
    done = _agent("sys.path.insert(0, '.')\nimport agent\nagent.openai_instrumentor().instrument()\n"
                  "print('instrumented')\nsys.exit(0)")
    assert done.returncode == 0 and done.stdout.strip() == "instrumented", done.stderr
