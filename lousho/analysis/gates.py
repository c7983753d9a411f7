"""The offline gate's decision rules over pass counts (seed §3.2 step 4, §4.1), as pure functions.

Each function answers one rule for one case or a set of cases; ``gate_operating`` computes their
exact error rates from the same functions' definitions. Counts are per side: ``base`` is the
current harness on fresh runs, ``candidate`` the proposal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lousho.analysis import _checks
from lousho.analysis.errors import BadInputError
from lousho.analysis.stats import SignTest, sign_test


@dataclass(frozen=True)
class GateRules:
    """The numbers of the gate and canary rules; the defaults are the seeds'.

    * training (seed §3.2): ``runs`` fresh runs per case per side; a case *helped* when the candidate
      passes at least ``min_gain`` more; the gate needs one helped case and none worse.
    * held-out: a case that drops is rerun ``rerun`` more times on both sides; the edit is rejected
      at a pooled drop of at least ``held_out_min_drop`` in ``runs + rerun``.
    * canary (seed §4.1): each training case passes at least ``canary_min`` of ``canary_runs``.
    * cost: the cost of a passing run may rise by at most ``max_token_rise`` (+50%): the seeds' rule counts
      tokens; ``cost_check`` counts dollars when every compared run has a price (``CaseTokens.usd``).
    * paired alternative: the exact sign test across cases at one-sided ``sign_alpha``.
    """

    runs: int = 3
    min_gain: int = 2
    rerun: int = 3
    held_out_min_drop: int = 2
    canary_runs: int = 6
    canary_min: int = 5
    max_token_rise: float = 0.5
    sign_alpha: float = 0.05

    def __post_init__(self) -> None:
        for name in ("runs", "min_gain", "rerun", "held_out_min_drop", "canary_runs", "canary_min"):
            _checks.positive_int(name, getattr(self, name))
        if self.min_gain > self.runs:
            raise BadInputError("min_gain", self.min_gain, f"at most runs ({self.runs})")
        if self.canary_min > self.canary_runs:
            raise BadInputError("canary_min", self.canary_min, f"at most {self.canary_runs}")
        _checks.non_negative("max_token_rise", self.max_token_rise)
        _checks.alpha(self.sign_alpha)


@dataclass(frozen=True)
class CaseTokens:
    """One case on one side: how many runs, how many passed, the tokens all of them used, and their price
    in USD (None when some run has no price: its model is not in the price table)."""

    runs: int
    passes: int
    tokens: float
    usd: float | None = None


@dataclass(frozen=True)
class CostCheck:
    """The cost rule's verdict, in ``unit``: "usd" when every run of the compared cases has a price, else
    "tokens". ``ratio`` (candidate over base, per passing run, in ``unit``) is ``None`` when no case passes
    on both sides; both units' figures are kept where known, so a reader sees what the other would say."""

    passed: bool
    ratio: float | None
    cases_compared: int
    unit: str = "tokens"
    tokens_ratio: float | None = None
    usd_ratio: float | None = None
    base_tokens_per_pass: float | None = None
    candidate_tokens_per_pass: float | None = None
    base_usd_per_pass: float | None = None
    candidate_usd_per_pass: float | None = None


DEFAULT_RULES = GateRules()


def training_helped(base: int, candidate: int, rules: GateRules = DEFAULT_RULES) -> bool:
    """The candidate passes at least ``min_gain`` more of the ``runs`` fresh runs."""
    _pair(base, candidate, rules.runs)
    return candidate - base >= rules.min_gain


def training_worse(base: int, candidate: int, rules: GateRules = DEFAULT_RULES) -> bool:
    """The candidate passes fewer runs than the base: any loss on a training case blocks the edit."""
    _pair(base, candidate, rules.runs)
    return candidate < base


def training_gate(cases: Sequence[tuple[int, int]], rules: GateRules = DEFAULT_RULES) -> bool:
    """At least one training case helped and none worse; ``cases`` are (base, candidate) passes."""
    if not cases:
        raise BadInputError("cases", list(cases), "at least one training case")
    helped = any(training_helped(b, c, rules) for b, c in cases)
    return helped and not any(training_worse(b, c, rules) for b, c in cases)


def held_out_needs_rerun(base: int, candidate: int, rules: GateRules = DEFAULT_RULES) -> bool:
    """A held-out case *drops* when the candidate passes fewer of the first ``runs``."""
    _pair(base, candidate, rules.runs)
    return candidate < base


def held_out_rejects(
    first: tuple[int, int],
    rerun: tuple[int, int] | None,
    rules: GateRules = DEFAULT_RULES,
) -> bool:
    """Whether a held-out case rejects the edit.

    Only a case that dropped on the first ``runs`` is rerun; it rejects when the pooled drop over
    ``runs + rerun`` per side is at least ``held_out_min_drop``. A case that did not drop never
    rejects, so ``rerun`` is ignored for it and required for one that did.
    """
    if not held_out_needs_rerun(*first, rules):
        return False
    if rerun is None:
        raise BadInputError("rerun", None, "the (base, candidate) passes of the rerun")
    _pair(*rerun, rules.rerun)
    return (first[0] + rerun[0]) - (first[1] + rerun[1]) >= rules.held_out_min_drop


def canary_passes(passes: int, rules: GateRules = DEFAULT_RULES) -> bool:
    """A training case passes the replay canary with at least ``canary_min`` of ``canary_runs``."""
    _checks.counts(passes, rules.canary_runs)
    return passes >= rules.canary_min


def cost_check(
    base: Sequence[CaseTokens], candidate: Sequence[CaseTokens], rules: GateRules = DEFAULT_RULES
) -> CostCheck:
    """The cost of a passing run may rise by at most ``max_token_rise``: in dollars where prices are known.

    Cost per passing run is all a side spent on a case divided by its passing runs: the cost of one
    success. It is pooled over the cases that pass at least once on *both* sides (seed §3.2: "compared
    only on cases that pass under both harnesses"), so a case the candidate newly fixes cannot count as a
    cost rise. With no such case the rule has nothing to compare and passes.

    The seeds count tokens; tokens hide what a user pays (output tokens cost about 4 times input tokens on
    most models), so the rule counts dollars when every run of the compared cases (every case, when none
    is compared) has a price on both sides, and tokens otherwise: never a mix of the two.
    """
    if len(base) != len(candidate):
        raise BadInputError("candidate", len(candidate), f"one entry per base case ({len(base)})")
    for side in (base, candidate):
        for case in side:
            _checks.counts(case.passes, case.runs)
            _checks.non_negative("tokens", case.tokens)
            if case.usd is not None:
                _checks.non_negative("usd", case.usd)
    pairs = list(zip(base, candidate, strict=True))
    both = [b.passes > 0 and c.passes > 0 for b, c in pairs]
    judged = [p for p, compared in zip(pairs, both, strict=True) if compared] or pairs
    priced = all(b.usd is not None and c.usd is not None for b, c in judged)
    tokens = _cost_rows(base, candidate, [c.tokens for c in base], [c.tokens for c in candidate], rules)
    usd = _cost_rows(base, candidate, [c.usd or 0.0 for c in base], [c.usd or 0.0 for c in candidate],
                     rules) if priced else None
    if usd is not None and usd[1] is None and tokens[1] is not None:
        usd = None  # both sides free (a model priced at 0): dollars compare nothing, tokens still do
    used = usd if usd is not None else tokens
    return CostCheck(
        passed=not used[0],
        ratio=used[1],
        cases_compared=sum(both),
        unit="usd" if usd is not None else "tokens",
        tokens_ratio=tokens[1],
        usd_ratio=None if usd is None else usd[1],
        base_tokens_per_pass=tokens[2],
        candidate_tokens_per_pass=tokens[3],
        base_usd_per_pass=None if usd is None else usd[2],
        candidate_usd_per_pass=None if usd is None else usd[3],
    )


def _cost_rows(base: Sequence[CaseTokens], candidate: Sequence[CaseTokens], base_cost: Sequence[float],
               candidate_cost: Sequence[float], rules: GateRules) -> tuple[bool, float | None, float | None,
                                                                            float | None]:
    """The rule in one unit: (fails, ratio, base per pass, candidate per pass), None where undefined."""
    xb, xc = np.array([[c.passes for c in base]]), np.array([[c.passes for c in candidate]])
    fails, ratio = cost_fails_arrays(np.array([base_cost]), xb, np.array([candidate_cost]), xc, rules.max_token_rise)
    both = (xb[0] > 0) & (xc[0] > 0)
    per_pass = [float(np.sum(np.array(cost)[both]) / np.sum(x[0][both])) if both.any() else None
                for cost, x in ((base_cost, xb), (candidate_cost, xc))]
    value = float(ratio[0])
    return bool(fails[0]), None if np.isnan(value) else value, per_pass[0], per_pass[1]


def cost_fails_arrays(
    base_tokens: ArrayLike,
    base_passes: ArrayLike,
    candidate_tokens: ArrayLike,
    candidate_passes: ArrayLike,
    max_rise: float,
) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """The cost rule on rows of cases (shape replicates x cases): (fails, ratio; NaN if undefined).

    Shared by ``cost_check`` and the cost rule's simulation, so both apply the same definition. The unit
    (tokens or dollars) is the caller's: the rule is a ratio, the same in any unit.
    """
    tb, xb = np.asarray(base_tokens, dtype=float), np.asarray(base_passes, dtype=float)
    tc, xc = np.asarray(candidate_tokens, dtype=float), np.asarray(candidate_passes, dtype=float)
    both = (xb > 0) & (xc > 0)
    passes_b, passes_c = (xb * both).sum(axis=1), (xc * both).sum(axis=1)
    defined = passes_b > 0
    per_pass_b = (tb * both).sum(axis=1) / np.where(defined, passes_b, 1.0)
    per_pass_c = (tc * both).sum(axis=1) / np.where(defined, passes_c, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(defined, per_pass_c / per_pass_b, np.nan)
    # A base that spent nothing at all: any spend by the candidate is an unbounded rise.
    fails = defined & (per_pass_c > (1.0 + max_rise) * per_pass_b * (1.0 + 1e-12))
    return fails, ratio


def paired_sign_gate(
    base: Sequence[int], candidate: Sequence[int], rules: GateRules = DEFAULT_RULES
) -> tuple[bool, SignTest]:
    """The alternative gate: accept when the exact sign test on per-case differences is significant.

    Differences are candidate minus base passes per case (same ``runs`` each), so evidence is pooled
    across cases instead of judged per case, where 3 runs can never reach p < 0.125 (anchors §3.4).
    """
    if len(base) != len(candidate) or not base:
        raise BadInputError("candidate", list(candidate), "one count per base case, at least one")
    for b, c in zip(base, candidate, strict=True):
        _pair(b, c, rules.runs)
    test = sign_test([c - b for b, c in zip(base, candidate, strict=True)])
    return test.p_value <= rules.sign_alpha, test


def _pair(base: int, candidate: int, runs: int) -> None:
    _checks.counts(base, runs)
    _checks.counts(candidate, runs)
