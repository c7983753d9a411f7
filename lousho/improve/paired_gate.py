"""The paired gate's decision on fresh runs (``lousho.analysis.paired``): the default gate.

Stage 1 runs each training case 3 times on each side (the gate's repeats); stage 2, only when stage 1
neither accepts nor rejects, 3 more (the rerun repeats), and tests the 6 against 6. The base's runs are
made once per step and shared by every candidate, as in the seeds' gate. Held-out cases are run only
for a candidate the training test accepted, and reject it on the harm-direction test. The cost rule is
the seeds' (+50% at most per passing run, over every run the candidate and the base made on the same
cases), in dollars when every compared run has a price, else in tokens (``gate.check_cost``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

from lousho.analysis import gates, paired
from lousho.analysis.paired_operating import false_accept_given_totals, held_out_false_reject_rows
from lousho.improve.gate import (
    GATE_REPEATS,
    RERUN_REPEATS,
    CaseRow,
    ErrorRate,
    GateDecision,
    _shown,
    _unscorable,
    case_posteriors,
    check_cost,
    cost_rate,
    cost_reason,
    cost_within,
    rate_model,
)
from lousho.improve.harness import Harness
from lousho.improve.records import Case, RunRecord

if TYPE_CHECKING:
    from lousho.improve.gate import Gate

# The recorded rates are conditional Monte Carlo with fixed seeds: the same runs give the same record.
# Each replicate draws its per-case rates from the posteriors with its own stream (DRAW_SEED), apart from
# the runs' stream (seed 0), so the two never share random numbers.
RATE_REPLICATES = 20_000
# The training record sums stage 2 over the stage-1 split exactly and samples only its totals: its s.e. is
# 6-15 times smaller than with a sampled split at the same count, so 5,000 replicates give a third of the
# s.e. or less of 20,000 sampled ones, and take no longer (every replicate now gets a stage 2, not only those
# whose sampled split went on).
TRAINING_REPLICATES = 5_000
DRAW_SEED = 1


def _draws(replicates: int) -> str:
    return f"{replicates:,} draws from the posteriors, one per replicate, seed {DRAW_SEED}"


def decide_paired(gate: Gate, name: str, candidate: Harness, flags: Sequence[str] = ()) -> GateDecision:
    runs_before = gate.runs_made()
    spent = 0
    rules, c = gate.paired, gate.candidates
    stages: list[dict[str, object]] = []

    def decision(passed: bool, reason: str, rows: list[CaseRow], rates: Sequence[ErrorRate],
                 cost: gates.CostCheck | None = None) -> GateDecision:
        made = spent + gate.runs_made() - runs_before
        return GateDecision(name, candidate.revision, passed, reason, tuple(rows), cost, tuple(rates), tuple(flags),
                            made, "paired", tuple(stages))

    base1 = gate.base_runs(gate.training)
    cand1 = gate.run_many(candidate, gate.training, GATE_REPEATS)
    spent += _count(cand1)
    rates = training_rates(base1, cand1, rules, c)
    rows = [_row(gate, case, base1[case.id], cand1[case.id]) for case in gate.training]
    unscorable = _unscorable(base1, cand1)
    if unscorable:
        return decision(False, f"cannot judge: {unscorable} gate runs could not be scored", rows, rates)
    ids = [case.id for case in gate.training]
    first = paired.stage_one(_each(base1, ids), _each(cand1, ids), rules, c)
    stages.append(asdict(first))
    base_all, cand_all = dict(base1), dict(cand1)
    level1, level2 = rules.levels(c)
    if first.verdict == "reject":
        return decision(False, f"stage 1: the candidate passed {first.candidate} runs, the base {first.base} of "
                               f"{first.runs * len(ids)} (p = {first.p_value:.3g}; going on needs p <= "
                               f"{rules.go_on} with the candidate ahead)", rows, rates)
    passed_at = f"stage 1 (p = {first.p_value:.3g} <= {level1:.3g})"
    if first.verdict == "continue":
        base2 = gate.base_reruns(gate.training)
        cand2 = gate.run_many(candidate, gate.training, RERUN_REPEATS)
        spent += _count(cand2)
        base_all = {i: base1[i] + base2[i] for i in ids}
        cand_all = {i: cand1[i] + cand2[i] for i in ids}
        rows = [_row(gate, case, base_all[case.id], cand_all[case.id]) for case in gate.training]
        unscorable = _unscorable(base2, cand2)
        if unscorable:
            return decision(False, f"cannot judge: {unscorable} stage-2 gate runs could not be scored", rows, rates)
        second = paired.stage_two(_each(base_all, ids), _each(cand_all, ids), rules, c)
        stages.append(asdict(second))
        if second.verdict == "reject":
            return decision(False, f"stage 2: the candidate passed {second.candidate} runs, the base {second.base} "
                                   f"of {second.runs * len(ids)} (p = {second.p_value:.3g}; accepting needs p <= "
                                   f"{level2:.3g})", rows, rates)
        passed_at = f"stage 2 (p = {second.p_value:.3g} <= {level2:.3g})"

    if gate.held_out:
        base_ho = gate.base_runs(gate.held_out)
        cand_ho = gate.run_many(candidate, gate.held_out, GATE_REPEATS)
        spent += _count(cand_ho)
        held_ids = [case.id for case in gate.held_out]
        rows += [_row(gate, case, base_ho[case.id], cand_ho[case.id]) for case in gate.held_out]
        rates += held_out_rates(base_ho, rules)
        unscorable = _unscorable(base_ho, cand_ho)
        if unscorable:
            return decision(False, f"cannot judge: {unscorable} held-out gate runs could not be scored", rows, rates)
        harmed, p = paired.held_out_harm(_each(base_ho, held_ids), _each(cand_ho, held_ids), rules.runs[0], rules)
        stages.append({"stage": "held-out", "runs": rules.runs[0], "base": sum(_each(base_ho, held_ids)),
                       "candidate": sum(_each(cand_ho, held_ids)), "p_value": p,
                       "verdict": "reject" if harmed else "pass"})
        if harmed:
            worst = min((r for r in rows if r.held_out), key=lambda r: r.candidate - r.base)
            return decision(False, f"the held-out cases got worse (p = {p:.3g} <= {rules.held_out_alpha}): "
                                   f"{worst.label} dropped {worst.base} -> {worst.candidate} of {worst.runs}", rows,
                            rates)
        base_all.update(base_ho)
        cand_all.update(cand_ho)

    cost = check_cost(base_all, cand_all, gate.rules)
    rates.append(cost_rate(base1, gate.rules, cost.unit))
    if not cost.passed:
        return decision(False, cost_reason(cost, gate.rules), rows, rates, cost)
    return decision(True, f"passed the paired test at {passed_at}; held-out cases not worse; {cost_within(cost)}",
                    rows, rates, cost)


def training_rates(base: Mapping[str, list[RunRecord]], candidate: Mapping[str, list[RunRecord]],
                   rules: paired.PairedRules, candidates: int) -> list[ErrorRate]:
    """P(the paired training test accepts | no effect): its bound, and the rate given the stage-1 runs.

    Under no effect a case's base and candidate runs are draws of one rate, so the rate is taken given each
    case's stage-1 total over both sides (``false_accept_given_totals``): stage 1 exactly, with no rate
    assumed; stage 2's totals drawn, one replicate each, from the cases' empirical-Bayes posteriors
    (``case_prior``) fitted to both sides' pooled runs. On the mixes of ``tests/analysis/test_recorded_rates``
    its mean is within 3% of the rate at the true per-case rates (s.e. about 1%); posteriors from the base's
    runs alone, for both stages, ran 4-10% low.
    """
    ids = list(base)
    pooled = {i: base[i] + candidate[i] for i in ids}
    totals = [sum(r.passed for r in pooled[i]) for i in ids]
    post = case_posteriors(pooled)
    model = (f"independent runs; given each case's passes over both sides' {2 * rules.runs[0]} stage-1 runs "
             f"(exchangeable under no effect: stage 1 exact, no rates assumed; pooled passes [{_shown(totals)}]); "
             "stage 2's totals at rates where "
             + post.describe("both sides' stage-1 runs, pooled under no effect")
             + f"; drawn by {_draws(TRAINING_REPLICATES)}; {candidates} candidate{'s' if candidates != 1 else ''} "
             "tried in this step")
    one = false_accept_given_totals(totals, post.draws(TRAINING_REPLICATES, DRAW_SEED), rules, candidates=candidates)
    method = (f"conditional Monte Carlo, {TRAINING_REPLICATES:,} replicates, seed 0, stage 1 and the split exact, "
              f"s.e. {one.se:.2g}")
    at = f"{post.a.size} training cases, each candidate at {rules.alpha / candidates:.4g}"
    return [
        ErrorRate("training", "P(accept) for one candidate with no real effect", one.rate, at, method, model,
                  candidates),
        ErrorRate("training", f"P(some of {candidates} candidates accepted) with no real effect",
                  min(1.0, candidates * one.rate), at, "upper bound: candidates times one candidate's rate", model,
                  candidates),
        ErrorRate("training", "P(accept) with no real effect, for any per-case rates (the design's bound)",
                  rules.alpha, at, "union bound over the two stages and the candidates", "none: exact conditional "
                  "test, valid for every vector of per-case rates", candidates),
    ]


def held_out_rates(base: Mapping[str, list[RunRecord]], rules: paired.PairedRules) -> list[ErrorRate]:
    if not base:
        return []
    post = case_posteriors(base)
    false = held_out_false_reject_rows(post.draws(RATE_REPLICATES, DRAW_SEED), rules)
    return [ErrorRate("held-out", "P(reject) for an edit that changes nothing", false.rate,
                      f"{post.a.size} held-out cases, one-sided {rules.held_out_alpha} (all cases, and each at "
                      f"{rules.held_out_alpha}/{post.a.size})",
                      f"simulated, {RATE_REPLICATES:,} replicates, seed 0, s.e. {false.se:.4f}",
                      rate_model(post, 1, _draws(RATE_REPLICATES)))]


def _row(gate: Gate, case: Case, base: list[RunRecord], candidate: list[RunRecord]) -> CaseRow:
    b, c = sum(r.passed for r in base), sum(r.passed for r in candidate)
    verdict = ("dropped" if c < b else "same") if case.held_out else "helped" if c > b else "worse" if c < b else "same"
    return CaseRow(gate.labels[case.id], case.held_out, b, c, len(base), verdict,
                   base_tokens=sum(r.tokens for r in base), candidate_tokens=sum(r.tokens for r in candidate))


def _each(runs: Mapping[str, list[RunRecord]], ids: Sequence[str]) -> list[int]:
    return [sum(r.passed for r in runs[i]) for i in ids]


def _count(runs: Mapping[str, list[RunRecord]]) -> int:
    return sum(len(v) for v in runs.values())
