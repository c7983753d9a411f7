"""Gate, held-out, canary, cost and paired rules: decisions, exact error rates (improve-anchors
§3.4), and a simulation through the decision functions themselves."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from lousho.analysis import gate_operating as oc
from lousho.analysis.errors import BadInputError
from lousho.analysis.gates import (
    CaseTokens,
    GateRules,
    canary_passes,
    cost_check,
    held_out_needs_rerun,
    held_out_rejects,
    paired_sign_gate,
    training_gate,
    training_helped,
    training_worse,
)
from lousho.analysis.stats import binomial_pmf

# --- decisions ---------------------------------------------------------------------------------


def test_a_training_case_helps_only_with_two_more_passes_in_three() -> None:
    assert training_helped(1, 3) and training_helped(0, 2)
    assert not training_helped(1, 2) and not training_helped(3, 3)


def test_a_training_case_is_worse_with_any_lost_pass() -> None:
    assert training_worse(3, 2) and not training_worse(2, 2)


def test_the_training_gate_needs_one_helped_case_and_none_worse() -> None:
    assert training_gate([(0, 2), (3, 3)])
    assert not training_gate([(0, 2), (3, 2)])
    assert not training_gate([(1, 2), (2, 2)])


def test_a_held_out_case_that_did_not_drop_never_rejects_whatever_its_rerun() -> None:
    assert not held_out_needs_rerun(2, 2)
    assert not held_out_rejects((2, 2), (3, 0))
    assert not held_out_rejects((2, 3), None)


def test_a_held_out_case_that_dropped_rejects_at_a_pooled_drop_of_two_in_six() -> None:
    assert held_out_needs_rerun(3, 2)
    assert not held_out_rejects((3, 2), (2, 2))  # pooled 5 v 4
    assert held_out_rejects((3, 2), (3, 2))  # pooled 6 v 4
    assert held_out_rejects((3, 1), (2, 2))  # pooled 5 v 3
    assert not held_out_rejects((3, 1), (2, 3))  # pooled 5 v 4


def test_a_held_out_case_that_dropped_needs_its_rerun() -> None:
    with pytest.raises(BadInputError):
        held_out_rejects((3, 2), None)


def test_the_canary_passes_at_five_of_six() -> None:
    assert canary_passes(5) and canary_passes(6) and not canary_passes(4)


def test_cost_rule_compares_tokens_per_passing_run_on_cases_passing_on_both_sides() -> None:
    base = [CaseTokens(3, 3, 300.0), CaseTokens(3, 0, 900.0), CaseTokens(3, 1, 100.0)]
    # Case 2 fails on the base: its (cheap or dear) candidate runs are not compared.
    candidate = [CaseTokens(3, 3, 450.0), CaseTokens(3, 3, 10.0), CaseTokens(3, 1, 150.0)]
    check = cost_check(base, candidate)
    assert check.cases_compared == 2
    assert check.ratio == pytest.approx((600 / 4) / (400 / 4))
    assert check.passed  # exactly +50% is allowed
    dearer = [CaseTokens(3, 3, 451.0), CaseTokens(3, 3, 10.0), CaseTokens(3, 1, 150.0)]
    assert not cost_check(base, dearer).passed


def test_cost_rule_compares_dollars_when_every_compared_case_has_a_price() -> None:
    # Fewer tokens, more dollars: priced, the rule fails in usd and keeps the tokens' figure beside it.
    base = [CaseTokens(3, 3, 3030.0, 0.000468), CaseTokens(3, 0, 900.0, None)]
    candidate = [CaseTokens(3, 3, 1800.0, 0.000788), CaseTokens(3, 3, 10.0, None)]
    check = cost_check(base, candidate)
    assert (check.unit, check.passed, check.cases_compared) == ("usd", False, 1)  # case 2 is not compared
    assert check.ratio == check.usd_ratio == pytest.approx(0.000788 / 0.000468)
    assert check.tokens_ratio == pytest.approx(1800 / 3030)
    assert (check.base_usd_per_pass, check.candidate_usd_per_pass) == pytest.approx((0.000156, 0.000788 / 3))
    assert (check.base_tokens_per_pass, check.candidate_tokens_per_pass) == (1010.0, 600.0)
    # One compared case without a price on one side: tokens, never a mix of units, and it passes.
    unpriced = [CaseTokens(3, 3, 1800.0, None), CaseTokens(3, 3, 10.0, None)]
    check = cost_check(base, unpriced)
    assert (check.unit, check.passed, check.usd_ratio, check.base_usd_per_pass) == ("tokens", True, None, None)
    assert check.ratio == check.tokens_ratio == pytest.approx(1800 / 3030)
    # A model priced at nothing on both sides: a ratio of dollars is undefined, so tokens are compared.
    free = cost_check([CaseTokens(3, 3, 300.0, 0.0)], [CaseTokens(3, 3, 600.0, 0.0)])
    assert (free.unit, free.passed, free.ratio) == ("tokens", False, 2.0)


def test_cost_rule_passes_with_nothing_to_compare() -> None:
    check = cost_check([CaseTokens(3, 0, 100.0)], [CaseTokens(3, 3, 999.0)])
    assert check.passed and check.ratio is None and check.cases_compared == 0


def test_paired_sign_gate_accepts_five_unanimous_cases_and_not_four() -> None:
    accepted, test = paired_sign_gate([0, 1, 1, 0, 2], [2, 2, 3, 1, 3])
    assert accepted and test.p_value == pytest.approx(1 / 32)
    accepted, _ = paired_sign_gate([0, 1, 1, 0, 2], [2, 2, 3, 1, 2])
    assert not accepted


@pytest.mark.parametrize(
    "make",
    [
        lambda: GateRules(runs=0),
        lambda: GateRules(min_gain=4),
        lambda: GateRules(canary_min=7),
        lambda: GateRules(sign_alpha=1.0),
        lambda: training_helped(4, 1),
        lambda: canary_passes(7),
        lambda: training_gate([]),
        lambda: paired_sign_gate([1, 2], [1]),
        lambda: cost_check([CaseTokens(3, 4, 1.0)], [CaseTokens(3, 3, 1.0)]),
        lambda: cost_check([CaseTokens(3, 3, 1.0, -0.1)], [CaseTokens(3, 3, 1.0, 0.1)]),
    ],
)
def test_bad_gate_inputs_are_usage_errors(make: Callable[[], object]) -> None:
    with pytest.raises(BadInputError):
        make()


# --- exact error rates -------------------------------------------------------------------------


@pytest.mark.parametrize(("p", "expected"), [(0.1, 0.021), (0.3, 0.086), (0.5, 0.109), (0.7, 0.086)])
def test_false_helped_rate_of_one_case_matches_the_anchors(p: float, expected: float) -> None:
    assert oc.helped_rate(p, p) == pytest.approx(expected, abs=5e-4)


@pytest.mark.parametrize(("cases", "expected"), [(3, 0.29), (5, 0.44), (10, 0.69)])
def test_false_helped_on_any_of_m_cases_matches_the_anchors(cases: int, expected: float) -> None:
    assert oc.any_helped_rate(0.5, 0.5, cases) == pytest.approx(expected, abs=5e-3)


@pytest.mark.parametrize(("b", "c", "expected"), [(0.3, 0.7, 0.42), (0.2, 0.8, 0.66), (0.0, 0.67, 0.75)])
def test_power_of_helped_matches_the_anchors(b: float, c: float, expected: float) -> None:
    assert oc.helped_rate(b, c) == pytest.approx(expected, abs=5e-3)


@pytest.mark.parametrize(
    ("p", "expected"), [(0.5, 0.19), (0.7, 0.17), (0.8, 0.13), (0.9, 0.066), (0.95, 0.025)]
)
def test_held_out_false_rejection_with_six_runs_a_side_matches_the_anchors(
    p: float, expected: float
) -> None:
    """The anchors' model: every held-out case gets 6 runs a side. 0.066 at p = 0.9."""
    rate = oc.held_out_reject_rate(p, p, rerun_only_on_drop=False)
    assert rate == pytest.approx(expected, abs=5e-3 if expected > 0.1 else 5e-4)


def test_held_out_false_rejection_of_the_seed_rule_is_0_054_at_p_0_9() -> None:
    """The seed rule reruns only a case that dropped; tie-then-drop paths cannot reject."""
    assert oc.held_out_reject_rate(0.9, 0.9) == pytest.approx(0.0541, abs=5e-5)
    assert oc.held_out_reject_rate(0.9, 0.9) < oc.held_out_reject_rate(
        0.9, 0.9, rerun_only_on_drop=False
    )


@pytest.mark.parametrize(
    ("b", "c", "miss"), [(0.9, 0.8, 0.78), (0.9, 0.7, 0.59), (0.9, 0.5, 0.26), (0.8, 0.5, 0.415)]
)
def test_held_out_misses_with_six_runs_a_side_match_the_anchors(b: float, c: float, miss: float) -> None:
    assert 1 - oc.held_out_reject_rate(b, c, rerun_only_on_drop=False) == pytest.approx(miss, abs=5e-3)


@pytest.mark.parametrize(
    ("p", "expected"),
    [(0.99, 0.999), (0.95, 0.967), (0.9, 0.886), (0.85, 0.776), (0.8, 0.655), (0.7, 0.420),
     (0.5, 0.109)],
)
def test_canary_pass_rate_matches_the_anchors(p: float, expected: float) -> None:
    assert oc.canary_pass_rate(p) == pytest.approx(expected, abs=5e-4)


def test_training_gate_rate_is_helped_and_not_worse_for_one_case() -> None:
    rate = oc.training_gate_rate([(0.5, 0.5)])
    assert rate == pytest.approx(oc.helped_rate(0.5, 0.5))


def test_sign_gate_cannot_accept_with_fewer_than_five_cases() -> None:
    assert oc.sign_gate_rate([(0.1, 0.99)] * 4) == 0.0
    assert oc.sign_gate_rate([(0.1, 0.99)] * 5) > 0.9


# --- simulation through the decision functions ---------------------------------------------------


def _within(simulated: float, exact: float, replicates: int) -> bool:
    return abs(simulated - exact) <= 4 * math.sqrt(exact * (1 - exact) / replicates) + 1e-9


def test_simulated_held_out_rules_agree_with_their_exact_rates() -> None:
    rng = np.random.default_rng(11)
    replicates = 40_000
    base = rng.binomial(3, 0.9, (replicates, 2))
    cand = rng.binomial(3, 0.9, (replicates, 2))
    seed_rule = sum(
        held_out_rejects((int(b[0]), int(c[0])), (int(b[1]), int(c[1])))
        for b, c in zip(base, cand, strict=True)
    )
    six_v_six = int(((base.sum(axis=1) - cand.sum(axis=1)) >= 2).sum())
    assert _within(seed_rule / replicates, oc.held_out_reject_rate(0.9, 0.9), replicates)
    assert _within(
        six_v_six / replicates,
        oc.held_out_reject_rate(0.9, 0.9, rerun_only_on_drop=False),
        replicates,
    )


def test_simulated_canary_and_helped_rules_agree_with_their_exact_rates() -> None:
    rng = np.random.default_rng(12)
    replicates = 40_000
    canary = sum(canary_passes(int(x)) for x in rng.binomial(6, 0.9, replicates))
    assert _within(canary / replicates, oc.canary_pass_rate(0.9), replicates)
    pairs = rng.binomial(3, 0.5, (replicates, 2))
    helped = sum(training_helped(int(b), int(c)) for b, c in pairs)
    assert _within(helped / replicates, oc.helped_rate(0.5, 0.5), replicates)


def test_simulated_training_and_sign_gates_agree_with_their_exact_rates() -> None:
    rng = np.random.default_rng(13)
    replicates, cases = 20_000, 6
    base = rng.binomial(3, 0.5, (replicates, cases))
    cand = rng.binomial(3, 0.8, (replicates, cases))
    gate = sum(
        training_gate(list(zip(b.tolist(), c.tolist(), strict=True)))
        for b, c in zip(base, cand, strict=True)
    )
    sign = sum(
        paired_sign_gate(b.tolist(), c.tolist())[0] for b, c in zip(base, cand, strict=True)
    )
    assert _within(gate / replicates, oc.training_gate_rate([(0.5, 0.8)] * cases), replicates)
    assert _within(sign / replicates, oc.sign_gate_rate([(0.5, 0.8)] * cases), replicates)


@pytest.mark.parametrize("p", [0.5, 0.9])
def test_cost_simulation_with_constant_tokens_agrees_with_the_exact_count_ratio(p: float) -> None:
    """With CV 0 every run costs 1 token, so tokens per passing run is 6 / passes: the rule fails
    exactly when base passes > 1.5 x candidate passes, an exact sum over two binomials."""
    pmf = binomial_pmf(6, p)
    fail = sum(pmf[b] * pmf[c] for b in range(1, 7) for c in range(1, 7) if b > 1.5 * c)
    defined = (1 - pmf[0]) ** 2
    sim = oc.cost_fail_rate(p, p, 0.0, replicates=100_000, seed=5)
    assert abs(sim.rate - fail / defined) <= 4 * sim.se + 1e-9
    assert sim.undefined == pytest.approx(1 - defined, abs=4 * math.sqrt(defined / 100_000) + 1e-9)


def test_the_vectorised_training_laws_are_the_scalar_rates() -> None:
    rng = np.random.default_rng(7)
    pb, pc = np.r_[0.0, 1.0, rng.random(40)], np.r_[1.0, 0.0, rng.random(40)]
    worse, helped = oc.training_case_laws(pb, pc)
    assert np.allclose(worse, [oc.worse_rate(b, c) for b, c in zip(pb, pc, strict=True)], atol=1e-14)
    assert np.allclose(helped, [oc.helped_rate(b, c) for b, c in zip(pb, pc, strict=True)], atol=1e-14)
