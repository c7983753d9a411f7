"""The monitor on real traffic: false rollbacks, power and crashes on the scenario suite (20,000 streams each,
vectorised), the vectorised rule checked against ``monitor.decide`` stream by stream, and the cluster statistics
on small inputs (the interval's coverage: test_interval_coverage.py). Each rate is asserted with 3 standard
errors to spare."""

from __future__ import annotations

import math
from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from lousho.analysis import traffic_model as tm
from lousho.analysis.clustered import clustered_interval, clustered_z, cr1_z, stratified_z
from lousho.analysis.frames import pass_rates
from lousho.analysis.monitor import Arm, MonitorConfig, decide
from lousho.analysis.stats import wilson_interval

REPS = 20_000
LOOKS, BOUNDS = (20, 40, 60), (2.1, 2.1, 2.1)
BY_NAME = {s.name: s for s in tm.SCENARIOS}
NO_CHANGE = [s for s in tm.SCENARIOS if not s.real_change]


def _se(rate: float, reps: int = REPS) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-4) / reps)


@pytest.mark.parametrize("scenario", NO_CHANGE, ids=lambda s: s.name)
def test_concurrent_design_false_rollback_at_most_5_percent(scenario: tm.Scenario) -> None:
    rate = tm.rollback_rate(scenario, "concurrent", LOOKS, BOUNDS, reps=REPS, seed=11)
    assert rate + 3 * _se(rate) <= 0.05, rate


@pytest.mark.parametrize("name", ["mix 30 -> 50% hard at the apply", "an outage per 200 runs",
                                  "sessions, sticky 0.9", "ordinary day: 30 -> 35% hard, outage per 1,000, sticky 0.5"])
def test_stratified_design_false_rollback_at_most_5_percent(name: str) -> None:
    rate = tm.rollback_rate(BY_NAME[name], "stratified", LOOKS, BOUNDS, reps=REPS, seed=12)
    assert rate + 3 * _se(rate) <= 0.05, rate


def test_the_seed_rule_fails_the_ordinary_day_as_the_audit_found() -> None:
    # The model reproduces the audit's figure for the rule as first built (0.26 stated 0.037).
    rate = tm.rollback_rate(BY_NAME["ordinary day: 30 -> 35% hard, outage per 1,000, sticky 0.5"], "seed",
                            LOOKS, BOUNDS, reps=REPS, min_drop=0.05, seed=13)
    assert rate > 0.2


def test_power_against_a_drop_from_0_9_to_0_8_by_60_base_runs() -> None:
    rate = tm.rollback_rate(BY_NAME["a real drop 0.9 -> 0.8, independent runs"], "concurrent", LOOKS, BOUNDS,
                            reps=REPS, seed=14)
    assert rate - 3 * _se(rate) >= 0.29, rate


def test_an_edit_that_crashes_half_the_hard_cases_is_rolled_back() -> None:
    crash = BY_NAME["the edit crashes 50% of hard cases (0.844 -> 0.761)"]
    rate = tm.rollback_rate(crash, "concurrent", LOOKS, BOUNDS, reps=REPS, seed=15)
    assert rate - 3 * _se(rate) >= 0.2, rate
    assert tm.rollback_rate(crash, "seed", LOOKS, BOUNDS, reps=REPS, min_drop=0.05, seed=15) < 0.02


def _arms(s: tm.Streams, row: int) -> tuple[Arm, Arm]:
    sides = []
    for side in (~s.applied[row], s.applied[row]):
        idx = np.flatnonzero(side)
        passed = tuple(None if s.crashed[row, i] else bool(s.y[row, i]) for i in idx)
        sides.append(Arm(passed, tuple(f"s{s.session[row, i]}" for i in idx),
                         tuple("hard" if s.hard[row, i] else "easy" for i in idx), tuple(int(i) for i in idx)))
    return sides[0], sides[1]


@pytest.mark.parametrize(("design", "name"), [
    ("concurrent", "ordinary day: 30 -> 35% hard, outage per 1,000, sticky 0.5"),
    ("concurrent", "the edit crashes 50% of hard cases (0.844 -> 0.761)"),
    ("stratified", "sessions, sticky 0.5"),
    ("seed", "the edit crashes 50% of hard cases (0.844 -> 0.761)"),
])
def test_the_vectorised_rule_agrees_with_decide_stream_by_stream(design: str, name: str) -> None:
    streams = 1_000
    s = tm.streams(BY_NAME[name], streams, concurrent=design == "concurrent", seed=16)
    if design == "stratified":  # no outage in this scenario: the breaker flags nothing
        assert not s.provider_error.any()
    config = MonitorConfig(design=design, design_p0=0.85)
    vector = tm.rollback_rows(s, design, LOOKS, BOUNDS, config.boundary.min_drop)
    scalar = np.array([decide(config, *_arms(s, r), timedelta(days=1)).action == "rollback"
                       for r in range(streams)])
    assert (vector == scalar).all(), np.flatnonzero(vector != scalar)[:5]
    assert 0 < vector.sum() < streams


def test_crashed_runs_count_as_failures_except_in_the_seed_design() -> None:
    base = Arm((True,) * 20)
    applied = Arm((True,) * 14 + (None,) * 6)
    assert decide(MonitorConfig(design="concurrent", design_p0=0.9), base, applied, timedelta(0)).action == "rollback"
    seed = decide(MonitorConfig(design="seed"), base, applied, timedelta(0))
    assert seed.action == "continue" and seed.look is None  # 14 scored runs: the look at 20 is not reached


def test_the_minimum_drop_clause_is_gone_unless_asked_for_and_then_binds() -> None:
    assert MonitorConfig().min_drop == 0.0 and MonitorConfig(design="seed").min_drop == 0.05
    # 60 v 60, 59 against 52 passes: z 2.42 at the last look, a drop of 0.117.
    base, applied = Arm((True,) * 59 + (False,) * 1), Arm((True,) * 52 + (False,) * 8)
    config = MonitorConfig(design_p0=0.9)
    assert decide(config, base, applied, timedelta(0)).action == "rollback"
    margin = MonitorConfig(design_p0=0.9, min_drop=0.12)
    decision = decide(margin, base, applied, timedelta(0))
    assert decision.action == "keep"
    assert decision.power < decide(config, base, applied, timedelta(0)).power  # the stated power includes it


def test_every_decision_names_its_design_and_assumptions() -> None:
    decision = decide(MonitorConfig(design_p0=0.9), [True] * 20, [True] * 20, timedelta(0))
    assert decision.design == "concurrent" and "held back" in decision.assumptions
    assert 0 < decision.false_alarm <= 0.05 and decision.power > 0.29
    assert "independent runs" in decide(MonitorConfig(design="seed"), [True] * 20, [True] * 20,
                                        timedelta(0)).assumptions


def test_cluster_statistics_on_small_inputs() -> None:
    # Sessions of one: the pooled z (2.191) over sqrt(G / (G - 1)), G = 40 runs.
    base, applied = [1] * 18 + [0] * 2, [1] * 12 + [0] * 8
    z = clustered_z(base, range(20), applied, range(20))
    assert z == pytest.approx(2.1909 / math.sqrt(40 / 39), abs=1e-3)
    assert cr1_z(base, range(20), applied, range(20)) == pytest.approx(2.1354, abs=1e-3)
    # Whole sessions that pass or fail together: the same counts carry less evidence.
    sessions = [i // 4 for i in range(20)]
    assert clustered_z(base, sessions, applied, sessions) < z
    interval = clustered_interval([1] * 8 + [0] * 2, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
    assert interval.low < 0.8 < interval.high and interval.clusters == 5


def test_pass_rates_clusters_by_session_then_case_then_run() -> None:
    frame = pl.DataFrame({
        "harness_revision": ["r"] * 10,
        "conversation_id": ["s1", "s1", "s2", "s2", None, None, None, None, None, None],
        "case_id": ["a", "a", "a", "b", "a", "a", "c", "c", None, None],
        "passed": [True, True, False, False, True, True, False, True, True, False],
        "input_tokens": [1] * 10, "output_tokens": [1] * 10, "cost_usd": [None] * 10,
    })
    [row] = pass_rates(frame, k=1).iter_rows(named=True)
    # Sessions s1 and s2, cases a and c (runs without a session), and the two runs with neither.
    labels = ["s1", "s1", "s2", "s2", "a", "a", "c", "c", "run8", "run9"]
    expected = clustered_interval(frame["passed"].to_list(), labels)
    assert row["clusters"] == 6 == expected.clusters
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((expected.low, expected.high), abs=1e-12)
    # A session's runs and the case's runs outside it are not one cluster, though they share case "a".
    assert row["design_effect"] == pytest.approx(expected.design_effect)
    # With neither sessions nor cases every run is its own cluster, and the interval is Wilson's.
    alone = frame.with_columns(conversation_id=pl.lit(None, pl.String), case_id=pl.lit(None, pl.String))
    [row] = pass_rates(alone, k=1).iter_rows(named=True)
    wilson = wilson_interval(6, 10)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((wilson.low, wilson.high), abs=1e-12)
    with pytest.raises(ValueError, match="interval"):
        pass_rates(frame, interval="wald")


def test_cases_seen_on_one_side_only_are_compared_pooled_not_dropped() -> None:
    """A watch whose base and edit ran different cases (a changed prompt on new traffic) still compares them:
    the unmatched cases are one pooled stratum, not a z of 0 that can never roll back."""
    sessions = list(range(20))
    z = stratified_z([1] * 20, sessions, ["a"] * 20, [0] * 20, sessions, ["b"] * 20)
    assert z > 2.1
    # Matched cases are still compared within their case: a shift of the mix between the sides cancels.
    mixed = stratified_z([1] * 10 + [0] * 10, sessions, ["easy"] * 10 + ["hard"] * 10,
                         [1] * 2 + [0] * 18, sessions, ["easy"] * 2 + ["hard"] * 18)
    assert abs(mixed) < 1e-9
