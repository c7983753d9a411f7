"""The layout check (seed §7.3, "W0"): is a multi-agent layout worth its tokens?

Three arms run the same 22 cases (11 tasks, two phrasings each) 3 times:

- **flat**: the coding agent alone;
- **flat-plus**: the same agent with a routing step added (a ``route`` tool it calls first), which
  separates the cost of routing from the cost of a second agent;
- **product**: a router agent that hands each report to a specialist sub-agent (a ``delegate`` tool that
  runs the coding agent with its area's skill on the same project copy), then reports back.

Per arm: pass^3 (averaged over cases) and mean tokens per run (router and sub-agent together). The
decision rule: the product layout may become the default only at or below 1.3 times the tokens of the
arm it is compared with (GO); above, NO-GO. With the scripted model the arms differ in the calls they
make (the specialist's skill teaches the hard tasks' rules, so the product passes them); with ``--live``
they differ in whatever the model does with them.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lousho.agent.tools import ToolContext
from lousho.analysis.stats import pass_hat_k
from lousho.bench.heal import rules
from lousho.bench.heal.bench import Attempt, Bench
from lousho.bench.heal.catalog import ARMS, RUNS_PER_CASE
from lousho.bench.heal.policy import ROUTER_MARK
from lousho.bench.heal.tasks import AREAS, all_cases

_SPECIALISTS: dict[Path, Callable[[str, str, str], str]] = {}

_ROUTE_TOOL = '''

@tool("Say which area and file a bug report is about. Call it first.")
def route(report: str) -> str:
    from lousho.bench.heal.tasks import task_of

    task = task_of(report)
    return f"area: {task.area}; file: {task.path}" if task else "no known area: read the report again"
'''
_ROUTE_RULE = "Before anything else, call route with the bug report: it tells you the area and the file to open.\n"
_ROUTER_INSTRUCTIONS = f"""{ROUTER_MARK} about calc, a small Python library, to specialists.

For each bug report, call delegate once with the report's area (one of {', '.join(AREAS)}) and the whole
report; a specialist fixes the bug. Then reply with one sentence passing on what the specialist did.
"""
_ROUTER_TOOLS = '''"""The product layout's router: one tool that hands a report to its area's specialist sub-agent."""

from lousho.agent import ToolContext, tool
from lousho.bench.heal.layout import delegate as _delegate


@tool("Hand a bug report to the specialist for its area and return the specialist's answer.")
def delegate(area: str, report: str, ctx: ToolContext) -> str:
    return _delegate(ctx, area, report)
'''
_AREA_ADVICE = {"dates": rules.MONTH_RULE, "money": rules.MONEY_RULE}
_GENERAL_ADVICE = "Read the function's docstring and the bug report's example before you change the code."


def delegate(ctx: ToolContext, area: str, report: str) -> str:
    """The router's tool: run the area's specialist on the router run's own project copy."""
    run = _SPECIALISTS.get(Path(ctx.agent_dir).resolve())
    if run is None:
        raise RuntimeError("no specialists are registered for this router")
    if area not in AREAS:
        return f"error: unknown area {area!r}; the areas are {', '.join(AREAS)}"
    return run(ctx.run_id, area, report)


def layout(bench: Bench, attempts: int | None) -> Iterator[dict[str, Any]]:
    runs = RUNS_PER_CASE if attempts is None else min(attempts, RUNS_PER_CASE)
    for arm in ARMS:
        yield measure(bench, arm, runs)


def measure(bench: Bench, arm: str, runs: int) -> dict[str, Any]:
    started = time.monotonic()
    a = bench.attempt(f"layout-{arm}", 1, live_agent=True)
    try:
        directory = _build(a, arm)
        cases: dict[str, dict[str, int]] = {}
        for c in all_cases():
            row = cases.setdefault(c.id, {"passes": 0, "runs": 0, "tokens": 0})
            for _ in range(runs):
                before = a.meter.tokens
                out = a.runner.run(directory, c.input, case_id=c.id, probe=True)
                row["runs"] += 1
                row["passes"] += out.verdict.passed is True
                row["tokens"] += a.meter.tokens - before
    finally:
        _SPECIALISTS.pop(a.agent_dir.resolve(), None)
        a.close()
    total = sum(r["runs"] for r in cases.values())
    full = [r for r in cases.values() if r["runs"] >= RUNS_PER_CASE]
    hat = sum(pass_hat_k(r["passes"], r["runs"], RUNS_PER_CASE) for r in full) / len(full) if full else None
    return {"kind": "layout", "arm": arm, "cases": cases, "runs_per_case": runs, "pass_hat_3": hat,
            "mean_tokens": sum(r["tokens"] for r in cases.values()) / total if total else 0.0,
            "seconds": round(time.monotonic() - started, 2), "dir": str(a.dir), **a.models(), **a.meter.to_dict()}


def _build(a: Attempt, arm: str) -> Path:
    root = a.agent_dir
    if arm == "flat-plus":
        tools = root / "tools.py"
        tools.write_text(tools.read_text(encoding="utf-8") + _ROUTE_TOOL, encoding="utf-8")
        instructions = root / "instructions.md"
        instructions.write_text(instructions.read_text(encoding="utf-8") + "\n" + _ROUTE_RULE, encoding="utf-8")
    if arm != "product":
        return root
    specialists = a.dir / "specialists"
    (root / "workspace").mkdir(exist_ok=True)
    for area in AREAS:
        target = specialists / area
        shutil.copytree(root, target, ignore=shutil.ignore_patterns("__pycache__", ".lousho", "workspace"))
        skill = target / "skills" / area / "SKILL.md"
        skill.parent.mkdir(parents=True)
        skill.write_text(f"---\ndescription: How to fix the {area} helpers of calc\n---\n"
                         f"{_AREA_ADVICE.get(area, _GENERAL_ADVICE)}\n", encoding="utf-8")
        (target / "workspace").symlink_to((root / "workspace").resolve(), target_is_directory=True)
    (root / "instructions.md").write_text(_ROUTER_INSTRUCTIONS, encoding="utf-8")
    (root / "tools.py").write_text(_ROUTER_TOOLS, encoding="utf-8")

    def run(run_id: str, area: str, report: str) -> str:
        result = a.runner.send(specialists / area, report, f"{run_id.split('.')[0]}.{area}")
        return result.output or f"(the specialist ended {result.finish_reason} without an answer)"

    _SPECIALISTS[root.resolve()] = run
    return root
