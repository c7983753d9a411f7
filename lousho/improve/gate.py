"""The gate (seed §3.2 step 4): a candidate against the current harness on fresh runs.

The current harness is rerun on repeat numbers no earlier phase used, so the gate never compares
against the unlucky runs that triggered editing. Two gates, chosen by name (``GATES``):

* ``paired`` (the default; ``paired_gate``): a case-matched exact test in two stages, its level split
  across the candidates the step tries, and a harm-direction exact test on the held-out cases.
* ``seed`` (``lousho.analysis.gates``): at least one training case passes at least 2 more runs in 3 and
  none gets worse; a held-out case that drops is rerun 3 more times on both sides and rejects at a
  pooled drop of at least 2 in 6.

Both apply the cost rule: the cost of a passing run may rise at most 50% on the cases that pass under
both, in dollars when every one of their runs has a price (``pricing``), else in tokens (the seeds'
unit); the decision says which. Every decision carries the error rates of the rules it applied, each
with its model: the per-case base rates it assumed and the number of candidates tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lousho.analysis import gate_operating as oc
from lousho.analysis import gates
from lousho.analysis.case_prior import NODES, CasePosteriors, posteriors
from lousho.analysis.gates import DEFAULT_RULES, CaseTokens, CostCheck, GateRules
from lousho.analysis.paired import DEFAULT_PAIRED, PairedRules
from lousho.improve.harness import Harness
from lousho.improve.pricing import runs_usd
from lousho.improve.records import Case, RunRecord

# Repeat numbers per phase, so that no two phases share a run of one harness on one case.
SEARCH_REPEATS = range(0, 3)  # the current harness before editing; each proposal's probe
GATE_REPEATS = range(3, 6)
RERUN_REPEATS = range(6, 9)
CANARY_REPEATS = range(9, 15)

GATES = ("paired", "seed")

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
    # What the figure assumes: runs independent, how the per-case base rates were estimated, candidates tried.
    model: str = ""
    candidates: int = 1


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
    gate: str = "seed"
    stages: tuple[dict[str, Any], ...] = ()  # the paired gate's tests: stage, runs, p-value, verdict

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
    kind: str = "paired"
    candidates: int = 1  # tried in this step: the paired gate splits its level across them
    paired: PairedRules = DEFAULT_PAIRED
    _base_runs: dict[str, list[RunRecord]] = field(default_factory=dict)
    _base_reruns: dict[str, list[RunRecord]] = field(default_factory=dict)

    def base_runs(self, cases: Sequence[Case]) -> dict[str, list[RunRecord]]:
        missing = [c for c in cases if c.id not in self._base_runs]
        if missing:
            self._base_runs.update(self.run_many(self.base, missing, GATE_REPEATS))
        return {c.id: self._base_runs[c.id] for c in cases}

    def decide(self, name: str, candidate: Harness, flags: Sequence[str] = ()) -> GateDecision:
        if self.kind == "paired":
            from lousho.improve.paired_gate import decide_paired

            return decide_paired(self, name, candidate, flags)
        return self._decide_seed(name, candidate, flags)

    def base_reruns(self, cases: Sequence[Case]) -> dict[str, list[RunRecord]]:
        missing = [c for c in cases if c.id not in self._base_reruns]
        if missing:
            self._base_reruns.update(self.run_many(self.base, missing, RERUN_REPEATS))
        return {c.id: self._base_reruns[c.id] for c in cases}

    def runs_made(self) -> int:
        return _count(self._base_runs) + _count(self._base_reruns)

    def _decide_seed(self, name: str, candidate: Harness, flags: Sequence[str] = ()) -> GateDecision:
        runs_before = _count(self._base_runs) + _count(self._base_reruns)
        spent = 0

        def decision(passed: bool, reason: str, rows: list[CaseRow], cost: CostCheck | None = None,
                     rates: Sequence[ErrorRate] = ()) -> GateDecision:
            made = spent + _count(self._base_runs) + _count(self._base_reruns) - runs_before
            return GateDecision(name, candidate.revision, passed, reason, tuple(rows), cost, tuple(rates),
                                tuple(flags), made, "seed")

        base_train = self.base_runs(self.training)
        cand_train = self.run_many(candidate, self.training, GATE_REPEATS)
        spent += _count(cand_train)
        rows = [self._row(c, base_train[c.id], cand_train[c.id]) for c in self.training]
        rates = list(training_rates(base_train, cand_train, self.rules, self.candidates))
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
        cost = check_cost(base_all, cand_all, self.rules)
        rates.append(cost_rate(base_all, self.rules, cost.unit))
        if not cost.passed:
            return decision(False, cost_reason(cost, self.rules), rows, cost, rates)
        helped = [r.label for r in rows if r.verdict == "helped"]
        return decision(True, "passed: " + ", ".join(helped) + f" passed at least {self.rules.min_gain} more runs "
                              f"in {self.rules.runs}; no case got worse; {cost_within(cost)}", rows, cost, rates)

    def _row(self, case: Case, base: list[RunRecord], candidate: list[RunRecord]) -> CaseRow:
        b, c = _passes(base), _passes(candidate)
        if case.held_out:
            verdict = "dropped" if c < b else "same"
        else:
            verdict = ("helped" if gates.training_helped(b, c, self.rules)
                       else "worse" if gates.training_worse(b, c, self.rules) else "same")
        return CaseRow(self.labels[case.id], case.held_out, b, c, len(base), verdict,
                       base_tokens=sum(r.tokens for r in base), candidate_tokens=sum(r.tokens for r in candidate))


def training_rates(base: Mapping[str, list[RunRecord]], candidate: Mapping[str, list[RunRecord]], rules: GateRules,
                   candidates: int = 1) -> list[ErrorRate]:
    """P(the seeds' training rule passes an edit with no real effect): given the cases' pooled passes, and its
    bound over every vector of per-case rates; P(pass) for a lift of the first case (power).

    Under no effect a case's base and candidate runs are draws of one rate, so the false-accept rate is
    taken given each case's total passes over both sides (``oc.training_gate_rate_given_totals``): exact,
    no rate assumed, and on average over the totals the rate at the true per-case rates for every vector
    (estimates from the base's 3 runs, even empirical-Bayes ones, ran 29-30% low on clustered cases). The
    power row needs the base's rates and the candidate's runs do not share them there, so it integrates
    each case's rate over its empirical-Bayes posterior from the base's runs (``case_prior``).
    With several candidates tried against the same base runs the step's rate is at most c times one's.
    """
    ids = list(base)
    totals = [_passes(base[i]) + _passes(candidate[i]) for i in ids]
    m = len(ids)
    one = oc.training_gate_rate_given_totals(totals, rules)
    at = f"{m} training cases"
    pooled = (f"independent runs; under no effect a case's {2 * rules.runs} runs (base and candidate) are "
              "exchangeable, so given its total passes the candidate's share is hypergeometric whatever its rate: "
              f"no per-case rates assumed; pooled passes [{_shown(totals)}] of {2 * rules.runs}; exact for these "
              "totals, so it varies between decisions, and its mean over the totals is the rate at the true "
              "per-case rates, for every vector of them; "
              f"{candidates} candidate{'s' if candidates != 1 else ''} tried in this step")
    out = [ErrorRate("training", "P(pass) for an edit with no real effect, one candidate", one, at,
                     "exact given each case's pooled passes (hypergeometric split)", pooled, 1),
           _power_rate(base, rules, candidates)]
    if candidates > 1:
        out.append(ErrorRate("training", f"P(some of {candidates} candidates passes) with no real effect",
                             min(1.0, candidates * one), at, "upper bound: candidates times one candidate's rate",
                             pooled, candidates))
    out.append(ErrorRate("training", "P(pass) with no real effect, for any per-case rates (the rule's bound)",
                         min(1.0, candidates * oc.training_gate_bound(m, rules)), at,
                         "largest over per-case rate vectors (some cases at one common rate on a grid of 10,001, "
                         "the rest at 0 or 1), times the candidates",
                         "independent runs; any per-case rates: the worst vector is taken to have its active "
                         "cases at one common rate, which a multistart optimiser over whole vectors does not beat "
                         f"(a numerical finding, not a proof); {candidates} candidate{'s' if candidates != 1 else ''}"
                         " tried in this step, union bound", candidates))
    return out


def _power_rate(base: Mapping[str, list[RunRecord]], rules: GateRules, candidates: int) -> ErrorRate:
    """P(pass) for an edit that lifts the first case by 0.4, the rest unchanged, at the base's posteriors.

    The rule's rate is a product over cases, so the posterior mean is exact by quadrature per case.
    """
    post = case_posteriors(base)
    lifted_not_worse, lifted_neither = _training_laws(post.first(), lambda p: np.minimum(p + 0.4, 1.0), rules)
    not_worse, neither = _training_laws(post, lambda p: p, rules)
    lifted = _some_helped_none_worse(np.r_[lifted_not_worse, not_worse[1:]], np.r_[lifted_neither, neither[1:]])
    return ErrorRate("training", "P(pass) for an edit that lifts the first case by 0.4 (power)", lifted,
                     f"{post.a.size} training cases",
                     "exact over per-case binomials, each case's rate integrated over its posterior",
                     rate_model(post, candidates, QUADRATURE), 1)


def _shown(values: Sequence[int]) -> str:
    return ", ".join(map(str, values[:12])) + (", ..." if len(values) > 12 else "")


def held_out_rates(base: Mapping[str, list[RunRecord]], rules: GateRules) -> list[ErrorRate]:
    if not base:
        return []
    post = case_posteriors(base)
    rejects = post.expect(np.vectorize(lambda p: oc.held_out_reject_rate(p, p, rules)))
    false = 1.0 - float(np.prod(1.0 - rejects))
    miss = 1.0 - float(post.first().expect(np.vectorize(
        lambda p: oc.held_out_reject_rate(p, max(p - 0.2, 0.0), rules)))[0])
    model = rate_model(post, 1, QUADRATURE)
    method = "exact binomial, each case's rate integrated over its posterior"
    return [ErrorRate("held-out", "P(reject) for an edit that changes nothing", false,
                      f"{post.a.size} held-out cases", method, model),
            ErrorRate("held-out", "P(miss) a real drop of 0.2 on the first held-out case", miss,
                      f"{post.a.size} held-out cases", method, model)]


QUADRATURE = f"Gauss-Jacobi quadrature, {NODES} nodes per case (exact)"


def rate_model(post: CasePosteriors, candidates: int, integration: str) -> str:
    """What a recorded rate assumes and how the per-case base rates behind it were estimated."""
    return (f"independent runs; {post.describe()}; integrated by {integration}; "
            f"{candidates} candidate{'s' if candidates != 1 else ''} tried in this step")


def case_posteriors(runs: Mapping[str, list[RunRecord]]) -> CasePosteriors:
    return posteriors([_passes(v) for v in runs.values()], [len(v) for v in runs.values()])


def _training_laws(post: CasePosteriors, candidate: Callable[[np.ndarray], np.ndarray],
                   rules: GateRules) -> tuple[np.ndarray, np.ndarray]:
    """Per case, E[P(not worse)] and E[P(neither worse nor helped)] over its posterior, the candidate's rate
    a function of the base's (the identity for no effect)."""
    def not_worse(p: np.ndarray) -> np.ndarray:
        return 1.0 - oc.training_case_laws(p, candidate(p), rules)[0]

    def neither(p: np.ndarray) -> np.ndarray:
        worse, helped = oc.training_case_laws(p, candidate(p), rules)
        return 1.0 - worse - helped

    return post.expect(not_worse), post.expect(neither)


def _some_helped_none_worse(not_worse: np.ndarray, neither: np.ndarray) -> float:
    # "Helped" and "worse" are disjoint per case and cases independent (``oc.training_gate_rate``).
    return float(np.prod(not_worse) - np.prod(neither))


def check_cost(base: Mapping[str, list[RunRecord]], candidate: Mapping[str, list[RunRecord]],
               rules: GateRules) -> CostCheck:
    """The cost rule over the cases both sides ran (in the base's order), both sides priced at one instant."""
    at_ns = time.time_ns()
    order = list(base)
    return gates.cost_check([_tokens(base[i], at_ns) for i in order], [_tokens(candidate[i], at_ns) for i in order],
                            rules)


def cost_reason(cost: CostCheck, rules: GateRules) -> str:
    """Why the cost rule failed, in its unit, with the other unit's figure when known."""
    limit = f"the limit is {rules.max_token_rise:+.0%}"
    what = "dollars" if cost.unit == "usd" else "tokens"
    other = ""
    if cost.unit == "usd" and cost.tokens_ratio is not None:
        other = f"; tokens per passing run changed {cost.tokens_ratio - 1:+.0%}"
    elif cost.unit == "tokens":
        other = "; not every run has a price, so tokens are compared"
    return (f"{what} per passing run rose {(cost.ratio or 0) - 1:+.0%} on the cases that pass under both "
            f"({limit}{other})")


def cost_within(cost: CostCheck) -> str:
    return f"cost within the limit ({'dollars' if cost.unit == 'usd' else 'tokens'} per passing run)"


def cost_rate(base: Mapping[str, list[RunRecord]], rules: GateRules, unit: str = "tokens") -> ErrorRate:
    """P(the cost rule fails an edit that changes no cost). The rule is a ratio, so one simulation serves
    both units: the cost of a run (its tokens, or its dollars) lognormal with CV 0.5."""
    p = _rate(base)
    what = "dollars" if unit == "usd" else "tokens"
    sim = oc.cost_fail_rate(p, p, 0.5, rules, runs=rules.runs, cases=max(len(base), 1), replicates=20_000)
    return ErrorRate("cost", f"P(fail) for an edit that changes no cost ({what} per passing run; cost CV 0.5 "
                             "assumed)", sim.rate,
                     f"{len(base)} cases at p={p:.2f}", f"simulated, 20,000 replicates, s.e. {sim.se:.3f}",
                     f"independent runs; one pooled pass rate {p:.2f}; {what} per run lognormal, CV 0.5, "
                     f"{rules.runs} runs a side per case")


def _rate(runs: Mapping[str, list[RunRecord]]) -> float:
    records = [r for rs in runs.values() for r in rs]
    if not records:
        return 0.5
    # Clipped so that an all-pass or all-fail sample still gets an informative rate, not a degenerate 0.
    return min(max(sum(r.passed for r in records) / len(records), 0.05), 0.95)


def _passes(records: Sequence[RunRecord]) -> int:
    return sum(r.passed for r in records)


def _tokens(records: Sequence[RunRecord], at_ns: int) -> CaseTokens:
    return CaseTokens(len(records), _passes(records), float(sum(r.tokens for r in records)), runs_usd(records, at_ns))


def _count(runs: Mapping[str, list[RunRecord]]) -> int:
    return sum(len(v) for v in runs.values())


def _unscorable(*sides: Mapping[str, list[RunRecord]]) -> int:
    return sum(r.status == "cannot-score" for side in sides for rs in side.values() for r in rs)
