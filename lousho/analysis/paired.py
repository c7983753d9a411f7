"""The paired gate: a case-matched exact test of candidate against base, in two stages, as pure functions.

Each training case is run ``r`` times on each side. Under no effect the two sides' runs of one case are
exchangeable, so given the case's total passes ``T_i`` over ``2r`` runs the candidate's passes ``C_i`` are
Hypergeometric(2r, T_i, r), independently across cases, *whatever the case's pass rate*. The p-value
``P(sum C* >= sum C_obs)`` is a convolution of those hypergeometric laws: exact for any mix of easy and
hard cases, with no pass rate assumed. The law depends only on the multiset of the ``T_i``, so it is
cached by the counts of each total.

Stage 1 (``runs[0]`` per side): accept at p <= ``accept[0]``; go on only if p <= ``go_on`` and the
candidate passes more runs than the base, else reject. Stage 2 (``runs[1]`` cumulative): accept at
p <= ``accept[1]``. By the union bound P(accept | no effect) <= accept[0] + accept[1] (0.05) for every
vector of per-case rates; with ``candidates`` tried in one step both levels are divided by their number.
Held-out cases reject on harm-direction exact tests (``P(sum C* <= sum C_obs)`` over the cases, and
each case's own, Bonferroni over the cases) at ``held_out_alpha``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from scipy.special import comb

from lousho.analysis import _checks
from lousho.analysis.errors import BadInputError

Verdict = Literal["accept", "continue", "reject"]


@dataclass(frozen=True)
class PairedRules:
    """The paired gate's numbers; the defaults hold P(accept | no effect) <= 0.05 for one candidate."""

    runs: tuple[int, int] = (3, 6)  # cumulative runs per side per case at stages 1 and 2
    accept: tuple[float, float] = (0.01, 0.04)
    go_on: float = 0.25  # stage 1 continues only at p <= go_on with the candidate ahead
    held_out_alpha: float = 0.10

    def __post_init__(self) -> None:
        if len(self.runs) != 2 or len(self.accept) != 2:
            raise BadInputError("runs", self.runs, "two stages: (stage-1 runs, cumulative stage-2 runs)")
        first, second = (_checks.positive_int("runs", n) for n in self.runs)
        if second <= first:
            raise BadInputError("runs", self.runs, "stage-2 runs greater than stage-1 runs")
        for a in (*self.accept, self.go_on, self.held_out_alpha):
            _checks.probability("alpha", a)
        if self.go_on < self.accept[0]:
            raise BadInputError("go_on", self.go_on, f"at least the stage-1 level {self.accept[0]}")

    @property
    def alpha(self) -> float:
        """The bound on P(accept | no effect) for one candidate (union bound over the two stages)."""
        return self.accept[0] + self.accept[1]

    def levels(self, candidates: int = 1) -> tuple[float, float]:
        """The two acceptance levels when ``candidates`` are tried in one step (Bonferroni split)."""
        c = _checks.positive_int("candidates", candidates)
        return self.accept[0] / c, self.accept[1] / c


DEFAULT_PAIRED = PairedRules()


@dataclass(frozen=True)
class StageResult:
    """One stage's test: its p-value, whether the candidate is ahead, and the verdict."""

    stage: int
    runs: int
    base: int  # passes summed over cases
    candidate: int
    p_value: float
    verdict: Verdict


# Exact p-values are ratios of binomial coefficients, so one can equal a level exactly (5/20 = 0.25); two
# ways of summing the same law differ in the last bits. Comparisons allow this much, so every
# implementation of the rule decides such a tie the same way (as "at the level").
SLACK = 1.0 + 1e-9


def at_most(p: float, level: float) -> bool:
    return p <= level * SLACK


def hypergeometric_pmf(runs: int, total: int) -> NDArray[np.float64]:
    """P(C = c), c = 0..runs: the candidate's share of ``total`` passes over ``2 runs`` exchangeable runs."""
    c = np.arange(runs + 1)
    return comb(total, c) * comb(2 * runs - total, runs - c) / comb(2 * runs, runs)


@lru_cache(maxsize=65_536)
def null_pmf(counts: tuple[int, ...]) -> NDArray[np.float64]:
    """The law of sum C_i under no effect; ``counts[t]`` is how many cases have total t (t = 0..2r).

    Cached by this multiset: it is all the law depends on. Read-only (it is shared by the cache).
    """
    runs = (len(counts) - 1) // 2
    pmf = np.ones(1)
    for total, k in enumerate(counts):
        if k:
            one = hypergeometric_pmf(runs, total)
            for _ in range(k):
                pmf = np.convolve(pmf, one)
    pmf.setflags(write=False)
    return pmf


def total_counts(totals: Sequence[int], runs: int) -> tuple[int, ...]:
    """The multiset key of ``null_pmf``: how many cases have each total 0..2 runs."""
    return tuple(np.bincount(np.asarray(totals, dtype=int), minlength=2 * runs + 1).tolist())


def upper_p(base: Sequence[int], candidate: Sequence[int], runs: int) -> float:
    """P(sum C* >= sum C_obs | T): small when the candidate passes more than chance would give it."""
    totals = _totals(base, candidate, runs)
    pmf = null_pmf(total_counts(totals, runs))
    return float(min(pmf[int(sum(candidate)):].sum(), 1.0))


def lower_p(base: Sequence[int], candidate: Sequence[int], runs: int) -> float:
    """P(sum C* <= sum C_obs | T): small when the candidate passes less (the harm direction)."""
    totals = _totals(base, candidate, runs)
    pmf = null_pmf(total_counts(totals, runs))
    return float(min(pmf[: int(sum(candidate)) + 1].sum(), 1.0))


def stage_one(base: Sequence[int], candidate: Sequence[int], rules: PairedRules = DEFAULT_PAIRED,
              candidates: int = 1) -> StageResult:
    """Stage 1 on per-case passes at ``rules.runs[0]`` runs a side: accept, continue or reject."""
    runs = rules.runs[0]
    p = upper_p(base, candidate, runs)
    level = rules.levels(candidates)[0]
    b, c = int(sum(base)), int(sum(candidate))
    verdict: Verdict = ("accept" if at_most(p, level) else "continue" if at_most(p, rules.go_on) and c > b
                        else "reject")
    return StageResult(1, runs, b, c, p, verdict)


def stage_two(base: Sequence[int], candidate: Sequence[int], rules: PairedRules = DEFAULT_PAIRED,
              candidates: int = 1) -> StageResult:
    """Stage 2 on cumulative per-case passes at ``rules.runs[1]`` runs a side: accept or reject."""
    runs = rules.runs[1]
    p = upper_p(base, candidate, runs)
    verdict: Verdict = "accept" if at_most(p, rules.levels(candidates)[1]) else "reject"
    return StageResult(2, runs, int(sum(base)), int(sum(candidate)), p, verdict)


def held_out_harm(base: Sequence[int], candidate: Sequence[int], runs: int,
                  rules: PairedRules = DEFAULT_PAIRED) -> tuple[bool, float]:
    """(rejects, p): the held-out cases are worse under the candidate.

    Two one-sided exact tests: the stratified one over all held-out cases at ``held_out_alpha`` (a harm
    spread over many cases), and each case's own at ``held_out_alpha`` / cases (a harm on one case that
    the others' noise would dilute in the sum: an edit that breaks one text helper). ``p`` is the smaller
    of the stratified p and the smallest per-case p times the number of cases (Bonferroni).
    """
    if not base:
        return False, 1.0
    pooled = lower_p(base, candidate, runs)
    single = min(lower_p([b], [c], runs) for b, c in zip(base, candidate, strict=True)) * len(base)
    p = min(pooled, single, 1.0)
    return at_most(p, rules.held_out_alpha), p


def _totals(base: Sequence[int], candidate: Sequence[int], runs: int) -> list[int]:
    if len(base) != len(candidate) or not base:
        raise BadInputError("candidate", list(candidate), "one count per base case, at least one")
    for x in (*base, *candidate):
        _checks.counts(x, runs)
    return [int(b) + int(c) for b, c in zip(base, candidate, strict=True)]
