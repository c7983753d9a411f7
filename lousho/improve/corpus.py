"""The corpus and its two checks: the replay canary before a write and the corpus guard after it.

The corpus (``.lousho/corpus.json``) holds the cases a harness must keep passing: *protected* cases
(the check module marks them) and *fixed* cases (training cases an applied edit fixed).

- Replay canary (seed §4.1): each training and corpus case runs 6 times under the proposal on repeat
  numbers the gate never used; each must pass at least 5 of 6.
- Corpus guard (§4.3): after a write, every corpus case runs 3 times under the new revision and 3
  times under the one before; a case that drops is rerun 3 more times on both sides and a pooled
  drop of 2 or more in 6 is a regression. A regression, or a guard that cannot judge (a run that
  could not be scored), rolls the edit back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lousho.analysis import gate_operating as oc
from lousho.analysis import gates
from lousho.analysis.gates import DEFAULT_RULES, GateRules
from lousho.improve.gate import CANARY_REPEATS, RunMany
from lousho.improve.harness import Harness
from lousho.improve.records import Case, RunRecord
from lousho.improve.state import Paths, iso, now_utc, write_json

GUARD_REPEATS = range(15, 18)
GUARD_RERUN_REPEATS = range(18, 21)


def load(paths: Paths) -> list[Case]:
    if not paths.corpus.exists():
        return []
    data = json.loads(paths.corpus.read_text(encoding="utf-8"))
    return [Case(id=c["id"], input=c["input"], protected=c.get("kind") == "protected", source="check")
            for c in data.get("cases", [])]


def add(paths: Paths, cases: Iterable[Case], kind: str, revision: str) -> list[Case]:
    """Add cases (by id; an existing id keeps its first entry); returns the ones that were new."""
    data: dict[str, Any] = {"cases": []}
    if paths.corpus.exists():
        data = json.loads(paths.corpus.read_text(encoding="utf-8"))
    known = {c["id"] for c in data["cases"]}
    new = [c for c in cases if c.id not in known and not c.held_out]
    for c in new:
        data["cases"].append({"id": c.id, "input": c.input, "kind": kind, "added_at": iso(now_utc()),
                              "revision": revision})
    if new:
        write_json(paths.corpus, data)
    return new


@dataclass(frozen=True)
class CheckDecision:
    """A canary's or a guard's verdict, with per-case counts and the rule's error rate."""

    name: str
    passed: bool
    reason: str
    cases: tuple[CaseCheck, ...] = ()
    error_rates: dict[str, float] = field(default_factory=dict)
    agent_runs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CaseCheck:
    case_id: str
    passes: int
    runs: int
    base_passes: int | None = None
    rerun_base: int | None = None
    rerun_passes: int | None = None
    verdict: str = ""


def replay_canary(run_many: RunMany, proposal: Harness, training: Sequence[Case], corpus: Sequence[Case],
                  rules: GateRules = DEFAULT_RULES) -> CheckDecision:
    cases = list(training) + [c for c in corpus if c.id not in {t.id for t in training}]
    runs = run_many(proposal, cases, CANARY_REPEATS)
    rows = []
    for case in cases:
        records = runs[case.id]
        passes = sum(r.passed for r in records)
        rows.append(CaseCheck(case.id, passes, len(records), verdict="pass" if gates.canary_passes(passes, rules)
                              else "fail"))
    count = sum(len(v) for v in runs.values())
    rates = {"P(a case at p=0.9 fails the canary)": 1 - oc.canary_pass_rate(0.9, rules),
             "P(a case at p=0.7 passes the canary)": oc.canary_pass_rate(0.7, rules)}
    unscorable = _unscorable(runs)
    if unscorable:
        return CheckDecision("canary", False, f"cannot judge: {unscorable} runs could not be scored", tuple(rows),
                             rates, count)
    failed = [r for r in rows if r.verdict == "fail"]
    if failed:
        f = failed[0]
        return CheckDecision("canary", False, f"case {f.case_id} passed {f.passes} of {f.runs} (needs "
                                              f"{rules.canary_min})", tuple(rows), rates, count)
    return CheckDecision("canary", True, f"every case passed at least {rules.canary_min} of {rules.canary_runs}",
                         tuple(rows), rates, count)


def corpus_guard(run_many: RunMany, before: Harness, after: Harness, corpus: Sequence[Case],
                 rules: GateRules = DEFAULT_RULES) -> CheckDecision:
    if not corpus:
        return CheckDecision("guard", True, "the corpus is empty: nothing to guard")
    new = run_many(after, corpus, GUARD_REPEATS)
    old = run_many(before, corpus, GUARD_REPEATS)
    count = sum(len(v) for v in (*new.values(), *old.values()))
    rows: list[CaseCheck] = []
    regression: CaseCheck | None = None
    for case in corpus:
        b, a = _passes(old[case.id]), _passes(new[case.id])
        row = CaseCheck(case.id, a, len(new[case.id]), b, verdict="same")
        if gates.held_out_needs_rerun(b, a, rules):
            new_rerun = run_many(after, [case], GUARD_RERUN_REPEATS)[case.id]
            old_rerun = run_many(before, [case], GUARD_RERUN_REPEATS)[case.id]
            count += len(new_rerun) + len(old_rerun)
            if _unscorable({"n": new_rerun, "o": old_rerun}):
                return CheckDecision("guard", False, f"cannot judge case {case.id}: a rerun could not be scored",
                                     tuple(rows), {}, count)
            rb, ra = _passes(old_rerun), _passes(new_rerun)
            rejects = gates.held_out_rejects((b, a), (rb, ra), rules)
            row = CaseCheck(case.id, a, len(new[case.id]), b, rb, ra, "regression" if rejects else "dropped-ok")
            if rejects and regression is None:
                regression = row
        rows.append(row)
    rates = {"P(a false regression on one case at p=0.9)": oc.held_out_reject_rate(0.9, 0.9, rules),
             "P(missing a real drop 0.9 -> 0.5 on one case)": 1 - oc.held_out_reject_rate(0.9, 0.5, rules)}
    unscorable = _unscorable(new) + _unscorable(old)
    if unscorable:
        return CheckDecision("guard", False, f"cannot judge: {unscorable} runs could not be scored", tuple(rows),
                             rates, count)
    if regression is not None:
        r = regression
        drop = (r.base_passes or 0) + (r.rerun_base or 0) - r.passes - (r.rerun_passes or 0)
        return CheckDecision("guard", False, f"case {r.case_id} regressed: {drop} fewer passes in "
                                             f"{rules.runs + rules.rerun}", tuple(rows), rates, count)
    return CheckDecision("guard", True, f"no corpus case regressed ({len(corpus)} cases)", tuple(rows), rates, count)


def _passes(records: Sequence[RunRecord]) -> int:
    return sum(r.passed for r in records)


def _unscorable(runs: dict[str, list[RunRecord]]) -> int:
    return sum(r.status == "cannot-score" for rs in runs.values() for r in rs)
