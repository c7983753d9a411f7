"""Rows of a heal benchmark run, built by hand, for the report's verdict tests."""

from __future__ import annotations

from typing import Any

from lousho.bench.heal.catalog import ARMS, CONDITIONS, RUNS_PER_CASE, SCENARIOS, STUDY_ATTEMPTS, STUDY_TASKS
from lousho.bench.heal.tasks import all_cases

COST = {"requests": 10, "agent_runs": 3, "tokens": 1000, "seconds": 1.0, "agent_model": "scripted",
        "editor_model": "scripted"}


def attempt(scenario: str, index: int, *, passed: bool = True, counted: bool = True,
            audit_ok: bool = True) -> dict[str, Any]:
    return {"kind": "attempt", "scenario": scenario, "attempt": index, "passed": passed, "counted": counted,
            "audit_ok": audit_ok, "outcome": "ok" if passed else "wrong", **COST}


def full_run(*, failing: dict[str, int] | None = None, short: dict[str, int] | None = None,
             real: int = 5, shuffled: int = 0) -> list[dict[str, Any]]:
    """A complete run: every scenario at its count (``short`` leaves some attempts out, ``failing`` fails
    some), the study with ``real`` and ``shuffled`` proposals per task, and every layout arm."""
    rows = []
    for s in SCENARIOS:
        count = s.attempts - (short or {}).get(s.name, 0)
        fails = (failing or {}).get(s.name, 0)
        rows += [attempt(s.name, i + 1, passed=i >= fails) for i in range(count)]
    for task, _ in STUDY_TASKS:
        for condition in CONDITIONS:
            wins = {"real": real, "shuffled": shuffled}.get(condition, 3)
            rows += [{"kind": "study", "task": task, "condition": condition, "attempt": i + 1, "proposal": i < wins,
                      "confirmed": i < wins, **COST} for i in range(STUDY_ATTEMPTS)]
    for arm in ARMS:
        cases = {c.id: {"passes": RUNS_PER_CASE, "runs": RUNS_PER_CASE, "tokens": 300} for c in all_cases()}
        rows.append({"kind": "layout", "arm": arm, "cases": cases, "pass_hat_3": 1.0,
                     "mean_tokens": {"flat": 100.0, "flat-plus": 150.0, "product": 180.0}[arm], **COST})
    return rows
