"""Pure statistics over counts: pooled z, Wilson, pass^k, the sign test, the binomial pmf."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binom

from lousho.analysis.errors import BadInputError
from lousho.analysis.stats import (
    binomial_pmf,
    pass_hat_k,
    pass_hat_k_arrays,
    pooled_z,
    sign_test,
    sign_test_p,
    wilson_arrays,
    wilson_interval,
)
from lousho.kernel.errors import LoushoError, UsageError


def test_pooled_z_matches_the_textbook_formula_and_is_positive_for_a_drop() -> None:
    pooled = (18 + 12) / 40
    expected = (18 / 20 - 12 / 20) / math.sqrt(pooled * (1 - pooled) * (2 / 20))
    assert pooled_z(18, 20, 12, 20) == pytest.approx(expected, rel=1e-12)
    assert expected > 0
    assert pooled_z(12, 20, 18, 20) == pytest.approx(-expected, rel=1e-12)


def test_pooled_z_handles_unequal_sides() -> None:
    pooled = (45 + 20) / (50 + 30)
    expected = (45 / 50 - 20 / 30) / math.sqrt(pooled * (1 - pooled) * (1 / 50 + 1 / 30))
    assert pooled_z(45, 50, 20, 30) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("base", "applied"), [(20, 20), (0, 0)])
def test_pooled_z_is_zero_when_both_sides_all_pass_or_all_fail(base: int, applied: int) -> None:
    assert pooled_z(base, 20, applied, 20) == 0.0


@pytest.mark.parametrize(
    ("passes", "runs", "low", "high"),
    [(18, 20, 0.70, 0.97), (54, 60, 0.80, 0.95), (2, 3, 0.21, 0.94), (3, 3, 0.44, 1.00),
     (5, 6, 0.44, 0.97), (6, 6, 0.61, 1.00)],
)
def test_wilson_intervals_match_the_anchor_figures(
    passes: int, runs: int, low: float, high: float
) -> None:
    interval = wilson_interval(passes, runs)
    assert (round(interval.low, 2), round(interval.high, 2)) == (low, high)
    assert interval.estimate == passes / runs


def test_wilson_interval_touches_zero_and_one_only_at_the_ends() -> None:
    assert wilson_interval(0, 10).low == 0.0
    assert wilson_interval(10, 10).high == 1.0
    assert 0.0 < wilson_interval(1, 10).low


def test_wilson_arrays_agree_with_the_scalar_form_row_by_row() -> None:
    passes, runs = np.array([0, 3, 18, 54]), np.array([5, 3, 20, 60])
    low, high = wilson_arrays(passes, runs, 0.9)
    for i in range(4):
        scalar = wilson_interval(int(passes[i]), int(runs[i]), 0.9)
        assert (low[i], high[i]) == pytest.approx((scalar.low, scalar.high), abs=1e-15)


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_contains_the_observed_rate(counts: tuple[int, int]) -> None:
    interval = wilson_interval(*counts)
    assert 0.0 <= interval.low <= interval.estimate <= interval.high <= 1.0


def test_pass_hat_k_is_the_average_over_every_k_subset_of_the_runs() -> None:
    runs = [True, True, False, True, False, True, True]
    for k in range(1, len(runs) + 1):
        subsets = list(itertools.combinations(runs, k))
        brute = sum(all(s) for s in subsets) / len(subsets)
        assert pass_hat_k(sum(runs), len(runs), k) == pytest.approx(brute, abs=1e-12)


@given(
    st.integers(1, 60).flatmap(
        lambda n: st.tuples(st.integers(0, n), st.just(n), st.integers(1, n))
    )
)
def test_pass_hat_k_is_never_above_the_plug_in_estimate(args: tuple[int, int, int]) -> None:
    # C(c,k)/C(n,k) = prod (c-i)/(n-i) <= (c/n)^k: the plug-in is biased upwards.
    passes, runs, k = args
    assert pass_hat_k(passes, runs, k) <= (passes / runs) ** k + 1e-12


def test_pass_hat_k_arrays_work_on_columns() -> None:
    out = pass_hat_k_arrays([3, 5, 0], [5, 5, 5], 2)
    assert out == pytest.approx([3 / 10, 1.0, 0.0])


def test_pass_hat_k_refuses_k_above_the_runs() -> None:
    with pytest.raises(BadInputError) as caught:
        pass_hat_k(2, 3, 4)
    assert caught.value.code == "LOUSHO_STATS_BAD_INPUT"


def test_sign_test_needs_five_unanimous_cases_for_p_below_0_05() -> None:
    assert sign_test([1, 1, 1, 1]).p_value == pytest.approx(0.0625)
    assert sign_test([1, 1, 1, 1, 1]).p_value == pytest.approx(0.03125)


def test_sign_test_with_ten_discordant_cases_needs_nine_one_way() -> None:
    assert sign_test_p(9, 1) == pytest.approx(11 / 1024)
    assert sign_test_p(8, 2) == pytest.approx(56 / 1024)
    assert sign_test_p(8, 2) > 0.05 > sign_test_p(9, 1)


def test_sign_test_on_three_paired_runs_cannot_go_below_0_125() -> None:
    assert sign_test([1, 1, 1]).p_value == pytest.approx(0.125)


def test_sign_test_drops_ties_and_counts_them() -> None:
    result = sign_test([2, 0, 0, -1, 1, 0.5])
    assert (result.positive, result.negative, result.ties) == (3, 1, 2)
    assert result.p_value == pytest.approx(sign_test_p(3, 1))
    assert sign_test([0, 0]).p_value == 1.0
    assert sign_test([-1, -1]).p_value == 1.0


@pytest.mark.parametrize(("n", "p"), [(1, 0.3), (20, 0.9), (60, 0.5), (1000, 0.9), (6, 0.0), (6, 1.0)])
def test_binomial_pmf_matches_scipy_stats(n: int, p: float) -> None:
    ours = binomial_pmf(n, p)
    assert ours == pytest.approx(binom.pmf(np.arange(n + 1), n, p), abs=1e-13)
    assert ours.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: pooled_z(21, 20, 3, 20), "passes"),
        (lambda: wilson_interval(0, 0), "runs"),
        (lambda: wilson_interval(3, 5, confidence=1.0), "confidence"),
        (lambda: wilson_arrays([1, 2], [1, 1]), "passes"),
        (lambda: sign_test([1.0, float("nan")]), "differences"),
    ],
)
def test_bad_counts_are_usage_errors_with_a_stable_code_and_hint(
    call: Callable[[], object], name: str
) -> None:
    with pytest.raises(BadInputError) as caught:
        call()
    error = caught.value
    assert isinstance(error, UsageError) and isinstance(error, LoushoError)
    assert error.code == "LOUSHO_STATS_BAD_INPUT"
    assert error.name == name
    assert error.hint
