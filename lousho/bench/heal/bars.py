"""The bars and the verdict: what each bar needs, whether the rows meet it, and the overall decision.

A scenario bar needs its count of attempts that tested something (precondition misses do not count).
It is **missed** as soon as one counted attempt failed (more attempts cannot undo a failure), **too
few** while it has fewer counted attempts than it needs, and **met** otherwise. The audit bar needs
every attempt's audit log to verify; the failure-name bars need 5 attempts per condition and real names
to beat shuffled ones by 3 proposals; the layout bar needs every arm's 22 cases x 3 runs (its GO / NO-GO
decides the default layout, not this benchmark's verdict).

Overall (the plan's rule, seed §6.4): **NO-GO** if a planted-harm bar (planted-editor, planted-forced) is
missed; else **INCOMPLETE** if some bar has too few attempts; else **GO with misses** if another bar is
missed; else **GO**.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lousho.bench.heal.catalog import (
    ARMS,
    BAR_MARGIN,
    CONDITIONS,
    LAYOUT_CASES,
    RUNS_PER_CASE,
    SCENARIOS,
    STUDY_ATTEMPTS,
    STUDY_TASKS,
    TOKEN_BAR,
)
from lousho.bench.heal.rows import of_kind

Status = Literal["met", "missed", "too few"]
Verdict = Literal["GO", "GO with misses", "NO-GO", "INCOMPLETE"]


@dataclass(frozen=True)
class Bar:
    name: str
    need: str  # what it needs, as the report prints it
    counts: str  # what the rows hold
    status: Status
    planted_harm: bool = False
    what: str = ""


def bars(rows: Sequence[dict[str, Any]]) -> list[Bar]:
    return [*scenario_bars(rows), audit_bar(rows), *study_bars(rows), layout_bar(rows)]


def scenario_bars(rows: Sequence[dict[str, Any]]) -> list[Bar]:
    attempts = of_kind(rows, "attempt")
    out = []
    for s in SCENARIOS:
        mine = [r for r in attempts if r["scenario"] == s.name]
        counted = [r for r in mine if r["counted"]]
        passed = sum(bool(r["passed"]) for r in counted)
        misses = len(mine) - len(counted)
        status: Status = "missed" if passed < len(counted) else "too few" if len(counted) < s.attempts else "met"
        counts = f"{passed}/{len(counted)} passed" + (f", {misses} precondition misses" if misses else "")
        out.append(Bar(s.name, f"{s.attempts} attempts", counts, status, s.planted_harm, s.must_happen))
    return out


def audit_bar(rows: Sequence[dict[str, Any]]) -> Bar:
    attempts = of_kind(rows, "attempt")
    need = sum(s.attempts for s in SCENARIOS)
    ok = sum(bool(r["audit_ok"]) for r in attempts)
    # An attempt that changed nothing (healthy runs no cycle) has an empty log: verified, but say how many.
    empty = sum(not r.get("audit_lines", 1) for r in attempts)
    status: Status = "missed" if ok < len(attempts) else "too few" if len(attempts) < need else "met"
    counts = f"{ok}/{len(attempts)} verified" + (f" ({empty} with no entries)" if empty else "")
    return Bar("audit", f"{need}+ attempt directories", counts, status,
               what="every attempt's audit log verifies (hash chain and head)")


def study_bars(rows: Sequence[dict[str, Any]]) -> list[Bar]:
    study = of_kind(rows, "study")
    out = []
    for task, _ in STUDY_TASKS:
        parts, proposals, enough = [], {}, True
        for condition in CONDITIONS:
            mine = [r for r in study if r["task"] == task and r["condition"] == condition][:STUDY_ATTEMPTS]
            proposals[condition] = sum(bool(r["proposal"]) for r in mine)
            confirmed = sum(bool(r["confirmed"]) for r in mine)
            enough = enough and len(mine) >= STUDY_ATTEMPTS
            parts.append(f"{condition} {proposals[condition]}/{len(mine)} ({confirmed})")
        margin = proposals["real"] - proposals["shuffled"]
        status: Status = "too few" if not enough else "met" if margin >= BAR_MARGIN else "missed"
        out.append(Bar(f"failure-names {task}", f"{STUDY_ATTEMPTS} per condition",
                       ", ".join(parts) + f"; margin {margin}", status,
                       what=f"real names beat shuffled names by at least {BAR_MARGIN} proposals in {STUDY_ATTEMPTS} "
                            "(counts: proposals for the task, and in brackets those confirmed at >= 5 of 6 runs)"))
    return out


def layout_bar(rows: Sequence[dict[str, Any]]) -> Bar:
    arms = {r["arm"]: r for r in of_kind(rows, "layout")}
    need = LAYOUT_CASES * RUNS_PER_CASE
    done = {arm: sum(c["runs"] for c in arms[arm]["cases"].values()) if arm in arms else 0 for arm in ARMS}
    status: Status = "met" if all(n >= need for n in done.values()) else "too few"
    return Bar("layout", f"{LAYOUT_CASES} cases x {RUNS_PER_CASE} runs per arm",
               ", ".join(f"{arm} {n} runs" for arm, n in done.items()), status,
               what="every arm measured (its decision is below)")


def layout_decisions(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The token bar, product against each other arm: GO at or below 1.3 times, NO-GO above."""
    arms = {r["arm"]: r for r in of_kind(rows, "layout")}
    if "product" not in arms:
        return []
    product = arms["product"]["mean_tokens"]
    lines = []
    for other in ("flat", "flat-plus"):
        if other in arms and arms[other]["mean_tokens"]:
            ratio = product / arms[other]["mean_tokens"]
            decision = "GO" if ratio <= TOKEN_BAR else "NO-GO"
            lines.append(f"product vs {other}: {ratio:.2f}x the tokens "
                         f"({'at or below' if ratio <= TOKEN_BAR else 'above'} {TOKEN_BAR}x): {decision}")
    return lines


def verdict(all_bars: Sequence[Bar]) -> Verdict:
    if any(b.status == "missed" and b.planted_harm for b in all_bars):
        return "NO-GO"
    if any(b.status == "too few" for b in all_bars):
        return "INCOMPLETE"
    if any(b.status == "missed" for b in all_bars):
        return "GO with misses"
    return "GO"
