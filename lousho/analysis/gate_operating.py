"""Error rates of the gate, held-out, canary and paired rules: exact sums over binomial counts.

Runs are independent with a true pass rate per case and side; every figure is an exact sum over the
product of the two sides' binomials (improve-anchors §3.7), except the cost rule, whose tokens need a
distribution assumption and are simulated (``cost_fail_rate``, reported with its standard error).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from scipy.special import bdtrc

from lousho.analysis import _checks
from lousho.analysis.errors import BadInputError
from lousho.analysis.gates import DEFAULT_RULES, GateRules, cost_fails_arrays
from lousho.analysis.paired import hypergeometric_pmf
from lousho.analysis.stats import binomial_pmf, sign_test_p


@dataclass(frozen=True)
class SimulatedRate:
    """A Monte Carlo rate: ``rate`` over the replicates where the rule is defined, its standard
    error, and the share of replicates where it is undefined (no case passes on both sides)."""

    rate: float
    se: float
    undefined: float
    replicates: int


def helped_rate(p_base: float, p_candidate: float, rules: GateRules = DEFAULT_RULES) -> float:
    """P(one training case shows "helped": candidate passes >= ``min_gain`` more of ``runs``)."""
    diff = _difference_pmf(rules.runs, p_base, p_candidate)
    return float(diff[rules.runs - rules.min_gain :: -1].sum())


def worse_rate(p_base: float, p_candidate: float, rules: GateRules = DEFAULT_RULES) -> float:
    """P(one training case shows "worse": the candidate passes fewer runs)."""
    diff = _difference_pmf(rules.runs, p_base, p_candidate)
    return float(diff[rules.runs + 1 :].sum())


def training_case_laws(
    p_base: NDArray[np.float64], p_candidate: NDArray[np.float64], rules: GateRules = DEFAULT_RULES
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``worse_rate`` and ``helped_rate`` on arrays of rate pairs at once: a decision integrates them over
    many rates per case (``case_prior``), and one numpy pass is far cheaper than a call per rate."""
    pb, pc = np.asarray(p_base, dtype=float).ravel(), np.asarray(p_candidate, dtype=float).ravel()
    r = rules.runs
    base, cand = binomial_pmf(r, pb[:, None]), binomial_pmf(r, pc[:, None])
    diff = np.zeros((pb.size, 2 * r + 1))  # index: base - candidate + runs, as ``_difference_pmf``
    for c in range(r + 1):
        diff[:, r - c : 2 * r - c + 1] += base * cand[:, c : c + 1]
    return diff[:, r + 1 :].sum(axis=1), diff[:, : r - rules.min_gain + 1].sum(axis=1)


def any_helped_rate(
    p_base: float, p_candidate: float, cases: int, rules: GateRules = DEFAULT_RULES
) -> float:
    """P(at least one of ``cases`` independent cases with these rates shows "helped")."""
    cases = _checks.positive_int("cases", cases)
    return 1.0 - (1.0 - helped_rate(p_base, p_candidate, rules)) ** cases


def training_gate_rate(
    cases: Sequence[tuple[float, float]], rules: GateRules = DEFAULT_RULES
) -> float:
    """P(the training gate passes): some case helped and none worse, cases independent.

    "Helped" and "worse" are disjoint per case, so P = prod(1 - worse) - prod(1 - worse - helped).
    """
    if not cases:
        raise BadInputError("cases", [], "at least one (base, candidate) pair of pass rates")
    not_worse = np.prod([1.0 - worse_rate(b, c, rules) for b, c in cases])
    neither = np.prod([1.0 - worse_rate(b, c, rules) - helped_rate(b, c, rules) for b, c in cases])
    return float(not_worse - neither)


def training_gate_rate_given_totals(totals: Sequence[int], rules: GateRules = DEFAULT_RULES) -> float:
    """P(the training gate passes | no effect, each case's total passes over its 2 ``runs`` runs, both sides).

    Under no effect a case's 2 r runs are exchangeable whatever its rate, so given its total t the
    candidate's share is hypergeometric and the rule's rate is exact with no rate assumed. Each case's
    factor is an unbiased estimate of its own factor in ``training_gate_rate`` (its mean over t ~ Bin(2r, p)
    is that factor at p), and the cases are independent, so the mean of this rate over the totals is the
    rate at the true per-case rates, for every vector of them: what 3 base runs a case cannot give.
    """
    r = rules.runs  # no cases: both products are 1 and the rule cannot pass
    worse, helped = np.zeros(len(totals)), np.zeros(len(totals))
    for i, total in enumerate(totals):
        t, _ = _checks.counts(total, 2 * r)
        share = hypergeometric_pmf(r, t)  # P(candidate passes c), c = 0..r
        gain = 2 * np.arange(r + 1) - t  # candidate - base
        worse[i], helped[i] = share[gain < 0].sum(), share[gain >= rules.min_gain].sum()
    return float(np.prod(1.0 - worse) - np.prod(1.0 - worse - helped))


@lru_cache(maxsize=256)  # a few case counts per project; every decision asks again
def training_gate_bound(cases: int, rules: GateRules = DEFAULT_RULES, grid: int = 10_001) -> float:
    """The largest P(the training gate passes | no effect) over every vector of ``cases`` per-case rates.

    A case at rate 0 or 1 can show neither "helped" nor "worse" (its factors are 1), so k of the cases
    active and the rest deterministic is always possible: the bound is the largest, over k <= ``cases``,
    of k cases at one common rate, maximised over a grid of rates. That the worst vector has its active cases
    at one rate is a numerical finding, not a theorem: a multistart optimiser over whole vectors finds
    nothing higher (``tests/analysis/test_recorded_rates``). With the default rules it is two cases at 0.5,
    0.132 for any number of cases from 2 on (0.109 for one case).
    """
    if cases == 0:
        return 0.0  # the rule needs a case that helped
    cases = _checks.positive_int("cases", cases)
    p = np.linspace(0.0, 1.0, grid)
    worse, helped = training_case_laws(p, p, rules)
    k = np.arange(1, cases + 1)[:, None]
    return float(((1.0 - worse) ** k - (1.0 - worse - helped) ** k).max())


def held_out_reject_rate(
    p_base: float,
    p_candidate: float,
    rules: GateRules = DEFAULT_RULES,
    *,
    rerun_only_on_drop: bool = True,
) -> float:
    """P(a held-out case rejects the edit).

    With ``rerun_only_on_drop`` (the seeds' rule, ``gates.held_out_rejects``) the pooled drop counts
    only when the first ``runs`` dropped. Without it every held-out case gets ``runs + rerun`` runs a
    side and rejects at a pooled drop of ``held_out_min_drop``: the model of improve-anchors §3.4,
    whose figures (0.066 at p = 0.9) are higher because paths that first tie and then drop count.
    """
    first = _difference_pmf(rules.runs, p_base, p_candidate)  # index: base - candidate + runs
    second = _difference_pmf(rules.rerun, p_base, p_candidate)
    # tail[j] = P(second difference >= j - rerun): reject needs d1 + d2 >= min_drop.
    tail = np.cumsum(second[::-1])[::-1]
    total = 0.0
    for index, mass in enumerate(first):
        d1 = index - rules.runs
        if rerun_only_on_drop and d1 <= 0:
            continue
        need = rules.held_out_min_drop - d1 + rules.rerun  # index into ``second``
        if need <= 0:
            total += mass
        elif need < second.size:
            total += mass * tail[need]
    return float(total)


def canary_pass_rate(p: float, rules: GateRules = DEFAULT_RULES) -> float:
    """P(one case passes the canary: at least ``canary_min`` of ``canary_runs``) at pass rate p."""
    p = _checks.unit_interval("p", p)
    return float(bdtrc(rules.canary_min - 1, rules.canary_runs, p))


def sign_gate_rate(
    cases: Sequence[tuple[float, float]], rules: GateRules = DEFAULT_RULES
) -> float:
    """P(the paired sign-test gate accepts) for independent cases with (base, candidate) rates.

    Exact: each case's difference is positive, negative or zero with probabilities from the two
    binomials; a DP over (positives, negatives) gives the joint law of the counts the test sees.
    """
    if not cases:
        raise BadInputError("cases", [], "at least one (base, candidate) pair of pass rates")
    joint = np.ones((1, 1))
    for b, c in cases:
        diff = _difference_pmf(rules.runs, b, c)  # index: base - candidate + runs
        middle = rules.runs
        up, down = diff[:middle].sum(), diff[middle + 1 :].sum()  # candidate ahead, behind
        tie = diff[middle]
        grown = np.zeros((joint.shape[0] + 1, joint.shape[1] + 1))
        grown[:-1, :-1] += joint * tie
        grown[1:, :-1] += joint * up
        grown[:-1, 1:] += joint * down
        joint = grown
    total = 0.0
    for positive in range(joint.shape[0]):
        for negative in range(joint.shape[1]):
            if joint[positive, negative] and sign_test_p(positive, negative) <= rules.sign_alpha:
                total += joint[positive, negative]
    return float(total)


def cost_fail_rate(
    p_base: float,
    p_candidate: float,
    cv: float,
    rules: GateRules = DEFAULT_RULES,
    *,
    runs: int = 6,
    cases: int = 1,
    token_ratio: float = 1.0,
    replicates: int = 100_000,
    seed: int = 0,
) -> SimulatedRate:
    """P(the cost rule fails), simulated: the rule's tokens need a distribution, not just counts.

    Tokens per run are lognormal with mean 1 (base) or ``token_ratio`` (candidate) and coefficient of
    variation ``cv``, independent of passing, with ``runs`` runs per case per side (the anchors'
    assumption, §3.4). The rate is over replicates where the rule is defined.
    """
    _checks.unit_interval("p_base", p_base)
    _checks.unit_interval("p_candidate", p_candidate)
    cv = _checks.non_negative("cv", cv)
    rng = np.random.default_rng(seed)
    sigma = float(np.sqrt(np.log1p(cv * cv)))
    shape = (replicates, cases, runs)

    def side(p: float, mean: float) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        tokens = rng.lognormal(np.log(mean) - sigma * sigma / 2.0, sigma, shape).sum(axis=2)
        return tokens, (rng.random(shape) < p).sum(axis=2)

    tb, xb = side(p_base, 1.0)
    tc, xc = side(p_candidate, token_ratio)
    fails, ratio = cost_fails_arrays(tb, xb, tc, xc, rules.max_token_rise)
    defined = ~np.isnan(ratio)
    count = int(defined.sum())
    rate = float(fails[defined].mean()) if count else float("nan")
    se = float(np.sqrt(rate * (1.0 - rate) / count)) if count else float("nan")
    return SimulatedRate(rate, se, 1.0 - count / replicates, replicates)


def _difference_pmf(runs: int, p_base: float, p_candidate: float) -> NDArray[np.float64]:
    """The law of base passes minus candidate passes, indexed by ``difference + runs``."""
    p_base = _checks.unit_interval("p_base", p_base)
    p_candidate = _checks.unit_interval("p_candidate", p_candidate)
    # convolve(base, reversed candidate)[i] = P(base - candidate = i - runs)
    return np.convolve(binomial_pmf(runs, p_base), binomial_pmf(runs, p_candidate)[::-1])
