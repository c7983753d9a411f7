"""The gate (seed §3.2 step 4): a candidate against the current harness on fresh runs.

The current harness is rerun on repeat numbers no earlier phase used, so the gate never compares
against the unlucky runs that triggered editing. Rules (``lousho.analysis.gates``): at least one
training case passes at least 2 more runs in 3 and none gets worse; a held-out case that drops is
rerun 3 more times on both sides and rejects at a pooled drop of at least 2 in 6; tokens per
passing run may rise at most 50% on the cases that pass under both. Every decision carries the
exact error rates of the rules it applied, at the pass rates it saw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lousho.analysis import gate_operating as oc
from lousho.analysis import gates
from lousho.analysis.gates import DEFAULT_RULES, CaseTokens, CostCheck, GateRules
from lousho.improve.harness import Harness
from lousho.improve.records import Case, RunRecord

# Repeat numbers per phase, so that no two phases share a run of one harness on one case.
SEARCH_REPEATS = range(0, 3)  # the current harness before editing; each proposal's probe
GATE_REPEATS = range(3, 6)
RERUN_REPEATS = range(6, 9)
CANARY_REPEATS = range(9, 15)

RunMany = Callable[[Harness, Sequence[Case], range], Mapping[str, list[RunRecord]]]


@dataclass(frozen=True)
class CaseRow:
    label: str  # "training case 2" / "held-out case 1": a card never shows a held-out case's text
    held_out: bool
    base: int
    candidate: int
    runs: int
    verdict: str  # helped, worse, same, dropped-ok, dropped-rejects
    rerun_base: int | None = None
    rerun_candidate: int | None = None
    base_tokens: int = 0
    candidate_tokens: int = 0


@dataclass(frozen=True)
class ErrorRate:
    """One rule's error rate at the pass rate the gate saw: what the decision could have got wrong."""

    rule: str
    meaning: str
    value: float
    at: str
    method: str = "exact binomial"


@dataclass(frozen=True)
class GateDecision:
    candidate: str
    revision: str
    passed: bool
    reason: str
    rows: tuple[CaseRow, ...] = ()
    cost: CostCheck | None = None
    error_rates: tuple[ErrorRate, ...] = ()
    flags: tuple[str, ...] = ()
    agent_runs: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost"] = asdict(self.cost) if self.cost else None
        return data


@dataclass
class Gate:
    """The base's fresh runs are made once and shared by every candidate the step gates."""

    base: Harness
    training: Sequence[Case]
    held_out: Sequence[Case]
    run_many: RunMany
    labels: Mapping[str, str]
    rules: GateRules = DEFAULT_RULES
    _base_runs: dict[str, list[RunRecord]] = field(default_factory=dict)
    _base_reruns: dict[str, list[RunRecord]] = field(default_factory=dict)

    def base_runs(self, cases: Sequence[Case]) -> dict[str, list[RunRecord]]:
        missing = [c for c in cases if c.id not in self._base_runs]
        if missing:
            self._base_runs.update(self.run_many(self.base, missing, GATE_REPEATS))
        return {c.id: self._base_runs[c.id] for c in cases}

    def decide(self, name: str, candidate: Harness, flags: Sequence[str] = ()) -> GateDecision:
        runs_before = _count(self._base_runs) + _count(self._base_reruns)
        spent = 0

        def decision(passed: bool, reason: str, rows: list[CaseRow], cost: CostCheck | None = None,
                     rates: Sequence[ErrorRate] = ()) -> GateDecision:
            made = spent + _count(self._base_runs) + _count(self._base_reruns) - runs_before
            return GateDecision(name, candidate.revision, passed, reason, tuple(rows), cost, tuple(rates),
                                tuple(flags), made)

        base_train = self.base_runs(self.training)
        cand_train = self.run_many(candidate, self.training, GATE_REPEATS)
        spent += _count(cand_train)
        rows = [self._row(c, base_train[c.id], cand_train[c.id]) for c in self.training]
        rates = list(training_rates(base_train, self.rules))
        unscorable = _unscorable(base_train, cand_train)
        if unscorable:
            return decision(False, f"cannot judge: {unscorable} gate runs could not be scored", rows, rates=rates)
        pairs = [(r.base, r.candidate) for r in rows]
        if not gates.training_gate(pairs, self.rules):
            worse = [r for r in rows if r.verdict == "worse"]
            if worse:
                w = worse[0]
                why = f"{w.label} got worse ({w.base} -> {w.candidate} of {w.runs})"
            else:
                why = f"no training case passed at least {self.rules.min_gain} more runs in {self.rules.runs}"
            return decision(False, why, rows, rates=rates)

        base_ho = self.base_runs(self.held_out)
        cand_ho = self.run_many(candidate, self.held_out, GATE_REPEATS)
        spent += _count(cand_ho)
        rates.extend(held_out_rates(base_ho, self.rules))
        rejected: CaseRow | None = None
        for case in self.held_out:
            row = self._row(case, base_ho[case.id], cand_ho[case.id])
            if gates.held_out_needs_rerun(row.base, row.candidate, self.rules):
                if case.id not in self._base_reruns:
                    self._base_reruns.update(self.run_many(self.base, [case], RERUN_REPEATS))
                cand_rerun = self.run_many(candidate, [case], RERUN_REPEATS)
                spent += _count(cand_rerun)
                rb = _passes(self._base_reruns[case.id])
                rc = _passes(cand_rerun[case.id])
                rejects = gates.held_out_rejects((row.base, row.candidate), (rb, rc), self.rules)
                row = CaseRow(row.label, True, row.base, row.candidate, row.runs,
                              "dropped-rejects" if rejects else "dropped-ok", rb, rc, row.base_tokens,
                              row.candidate_tokens)
                if rejects and rejected is None:
                    rejected = row
            rows.append(row)
        unscorable = _unscorable(base_ho, cand_ho)
        if unscorable:
            return decision(False, f"cannot judge: {unscorable} held-out gate runs could not be scored", rows,
                            rates=rates)
        if rejected is not None:
            pooled = ((rejected.base + (rejected.rerun_base or 0))
                      - (rejected.candidate + (rejected.rerun_candidate or 0)))
            total = self.rules.runs + self.rules.rerun
            return decision(False, f"{rejected.label} dropped {pooled} runs in {total} (the limit is "
                                   f"{self.rules.held_out_min_drop})", rows, rates=rates)

        base_all, cand_all = {**base_train, **base_ho}, {**cand_train, **cand_ho}
        order = [c.id for c in (*self.training, *self.held_out)]
        cost = gates.cost_check([_tokens(base_all[i]) for i in order], [_tokens(cand_all[i]) for i in order],
                                self.rules)
        rates.append(cost_rate(base_all, self.rules))
        if not cost.passed:
            rise = f"{(cost.ratio or 0) - 1:+.0%}"
            return decision(False, f"tokens per passing run rose {rise} on the cases that pass under both "
                                   f"(the limit is {self.rules.max_token_rise:+.0%})", rows, cost, rates)
        helped = [r.label for r in rows if r.verdict == "helped"]
        return decision(True, "passed: " + ", ".join(helped) + f" passed at least {self.rules.min_gain} more runs "
                              f"in {self.rules.runs}; no case got worse; cost within the limit", rows, cost, rates)

    def _row(self, case: Case, base: list[RunRecord], candidate: list[RunRecord]) -> CaseRow:
        b, c = _passes(base), _passes(candidate)
        if case.held_out:
            verdict = "dropped" if c < b else "same"
        else:
            verdict = ("helped" if gates.training_helped(b, c, self.rules)
                       else "worse" if gates.training_worse(b, c, self.rules) else "same")
        return CaseRow(self.labels[case.id], case.held_out, b, c, len(base), verdict,
                       base_tokens=sum(r.tokens for r in base), candidate_tokens=sum(r.tokens for r in candidate))


def training_rates(base: Mapping[str, list[RunRecord]], rules: GateRules) -> list[ErrorRate]:
    """P(the training rule passes an edit with no real effect), at the base's pass rate."""
    p = _rate(base)
    m = max(len(base), 1)
    return [ErrorRate("training", "P(pass) for an edit with no real effect", oc.training_gate_rate([(p, p)] * m, rules),
                      f"{m} training cases at p={p:.2f}"),
            ErrorRate("training", "P(pass) for an edit that lifts one case from p to p+0.4 (power)",
                      oc.training_gate_rate([(p, min(p + 0.4, 1.0))] + [(p, p)] * (m - 1), rules),
                      f"{m} training cases at p={p:.2f}")]


def held_out_rates(base: Mapping[str, list[RunRecord]], rules: GateRules) -> list[ErrorRate]:
    if not base:
        return []
    p = _rate(base)
    n = len(base)
    false = 1.0 - (1.0 - oc.held_out_reject_rate(p, p, rules)) ** n
    miss = 1.0 - oc.held_out_reject_rate(p, max(p - 0.2, 0.0), rules)
    return [ErrorRate("held-out", "P(reject) for an edit that changes nothing", false,
                      f"{n} held-out cases at p={p:.2f}"),
            ErrorRate("held-out", "P(miss) a real drop of 0.2 on one case", miss, f"p={p:.2f}")]


def cost_rate(base: Mapping[str, list[RunRecord]], rules: GateRules) -> ErrorRate:
    p = _rate(base)
    sim = oc.cost_fail_rate(p, p, 0.5, rules, runs=rules.runs, cases=max(len(base), 1), replicates=20_000)
    return ErrorRate("cost", "P(fail) for an edit that changes no cost (token CV 0.5 assumed)", sim.rate,
                     f"{len(base)} cases at p={p:.2f}", f"simulated, 20,000 replicates, s.e. {sim.se:.3f}")


def _rate(runs: Mapping[str, list[RunRecord]]) -> float:
    records = [r for rs in runs.values() for r in rs]
    if not records:
        return 0.5
    # Clipped so that an all-pass or all-fail sample still gets an informative rate, not a degenerate 0.
    return min(max(sum(r.passed for r in records) / len(records), 0.05), 0.95)


def _passes(records: Sequence[RunRecord]) -> int:
    return sum(r.passed for r in records)


def _tokens(records: Sequence[RunRecord]) -> CaseTokens:
    return CaseTokens(len(records), _passes(records), float(sum(r.tokens for r in records)))


def _count(runs: Mapping[str, list[RunRecord]]) -> int:
    return sum(len(v) for v in runs.values())


def _unscorable(*sides: Mapping[str, list[RunRecord]]) -> int:
    return sum(r.status == "cannot-score" for side in sides for rs in side.values() for r in rs)
