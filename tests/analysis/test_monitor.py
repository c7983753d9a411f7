"""The monitor's decision core (seed §4.3): planned looks only, cumulative counts, final verdicts."""

from __future__ import annotations

import math
from datetime import timedelta

import numpy as np
import pytest

from lousho.analysis.errors import BadInputError
from lousho.analysis.monitor import MonitorConfig, decide
from lousho.analysis.operating import stopping_probabilities

SEED = MonitorConfig(design="seed")  # the seeds' rule, kept by name
DAY = timedelta(days=1)


def runs(passes: int, fails: int) -> list[bool]:
    return [True] * passes + [False] * fails


def test_continues_before_the_first_look() -> None:
    decision = decide(SEED, runs(19, 0), runs(10, 9), DAY)
    assert decision.action == "continue"
    assert decision.look is None and decision.z is None


def test_rolls_back_at_a_look_where_the_drop_crosses() -> None:
    # 20 v 16 of 20: drop 0.2 > 0.05 and z = 2.108 >= 2.1.
    decision = decide(SEED, runs(20, 0), runs(16, 4), DAY)
    assert decision.action == "rollback"
    assert (decision.look, decision.runs) == (1, 20)
    assert decision.z == pytest.approx(2.108, abs=1e-3)
    assert decision.drop == pytest.approx(0.2)
    assert decision.bound == 2.1


def test_a_look_short_of_the_boundary_continues_to_the_next_look() -> None:
    decision = decide(SEED, runs(20, 0), runs(17, 3), DAY)
    assert decision.action == "continue"
    assert decision.look == 1 and decision.z == pytest.approx(1.80, abs=1e-2)


def test_never_decides_between_looks_on_runs_past_the_look() -> None:
    # Look 1 used the first 20 runs (no crossing). Ten more failures arrive on the applied side: a
    # rollback-sized drop, but look 2 needs 40 runs a side, so nothing is decided yet.
    applied = runs(20, 0) + runs(0, 10)
    decision = decide(SEED, runs(30, 0), applied, DAY)
    assert decision.action == "continue"
    assert decision.look == 1 and decision.applied_passes == 20


def test_uses_only_the_first_n_runs_of_each_side_at_a_look() -> None:
    # The base's runs after the 20th are all failures; at look 1 they must not count.
    base = runs(20, 0) + runs(0, 15)
    decision = decide(SEED, base, runs(16, 4), DAY)
    assert decision.action == "rollback"
    assert decision.base_passes == 20


def test_one_side_reaching_the_look_is_not_a_look() -> None:
    decision = decide(SEED, runs(60, 0), runs(10, 9), DAY)
    assert decision.action == "continue" and decision.look is None


def test_keeps_the_edit_after_the_last_look_without_a_crossing() -> None:
    decision = decide(SEED, runs(57, 3), runs(55, 5), DAY)
    assert decision.action == "keep"
    assert (decision.look, decision.runs) == (3, 60)


def test_later_looks_roll_back_on_cumulative_counts() -> None:
    # Neither 20-run window crosses on its own (20 v 18: z = 1.45; then 18 v 13: z = 1.89), but the
    # cumulative counts at look 2 do (38 v 31 of 40: z = 2.27).
    base = runs(38, 2)
    applied = runs(18, 2) + runs(13, 7)
    decision = decide(SEED, base, applied, DAY)
    assert decision.action == "rollback" and decision.look == 2


def test_kept_unverified_after_seven_days_without_the_last_look() -> None:
    assert decide(SEED, runs(45, 0), runs(45, 0), timedelta(days=6, hours=23)).action == "continue"
    decision = decide(SEED, runs(45, 0), runs(45, 0), timedelta(days=7))
    assert decision.action == "kept-unverified"
    assert decision.look == 2  # the last look it did reach is still reported


def test_a_regression_reached_in_time_still_rolls_back_after_the_deadline() -> None:
    decision = decide(SEED, runs(20, 0), runs(16, 4), timedelta(days=9))
    assert decision.action == "rollback"


def test_every_decision_states_the_rules_exact_error_rates() -> None:
    config = MonitorConfig(design_p0=0.9, design="seed")
    decision = decide(config, [], [], timedelta(0))
    assert decision.p0 == 0.9 and decision.p1 == pytest.approx(0.8)
    assert decision.false_alarm == pytest.approx(0.0369, abs=5e-5)
    assert decision.power == pytest.approx(0.347, abs=5e-4)


def test_error_rates_default_to_the_base_rate_seen_at_the_look() -> None:
    decision = decide(SEED, runs(16, 4), runs(15, 5), DAY)
    assert decision.p0 == pytest.approx(0.8)
    exact = stopping_probabilities(SEED.boundary, 0.8, 0.8).sum()
    assert decision.false_alarm == pytest.approx(exact)


def test_the_same_runs_give_the_same_decision_however_often_asked() -> None:
    base, applied = runs(38, 2), runs(31, 9)
    first = decide(SEED, base, applied, DAY)
    assert all(decide(SEED, base, applied, DAY) == first for _ in range(3))


def test_other_rules_decide_on_their_own_boundary() -> None:
    pocock = MonitorConfig(rule="pocock", alpha=0.05, design="seed")
    decision = decide(pocock, runs(20, 0), runs(17, 3), DAY)
    assert decision.bound == pytest.approx(1.992, abs=5e-4)
    assert decision.rule == "pocock"


def test_to_dict_carries_the_action_evidence_and_error_rates() -> None:
    data = decide(SEED, runs(20, 0), runs(16, 4), DAY).to_dict()
    assert data["action"] == "rollback"
    assert {"look", "z", "drop", "false_alarm", "power", "reason"} <= set(data)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"looks": (40, 20)},
        {"max_age": timedelta(0)},
        {"rule": "pocock", "alpha": 2.0},
        {"design_p0": 1.0},
        {"power_drop": 0.0},
        {"alpha": 0.05},
    ],
)
def test_bad_config_is_a_usage_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(BadInputError):
        MonitorConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("base", "applied", "age"),
    [([1, 0, 1], [True], DAY), ([True], [True], timedelta(-1)), ([[True]], [True], DAY)],
)
def test_bad_runs_are_usage_errors(base: object, applied: object, age: timedelta) -> None:
    with pytest.raises(BadInputError):
        decide(SEED, base, applied, age)  # type: ignore[arg-type]


def test_decisions_on_simulated_runs_agree_with_the_exact_dp() -> None:
    """The decision core, fed random run sequences, rolls back as often as the DP says."""
    rng = np.random.default_rng(2025)
    replicates = 4_000
    p0, p1 = 0.9, 0.75
    looks_hit = np.zeros(3)
    for _ in range(replicates):
        decision = decide(SEED, rng.random(60) < p0, rng.random(60) < p1, DAY)
        if decision.action == "rollback":
            looks_hit[decision.look - 1] += 1
    exact = stopping_probabilities(SEED.boundary, p0, p1)
    for p_exact, p_sim in zip(exact.cumsum(), looks_hit.cumsum() / replicates, strict=True):
        assert abs(p_sim - p_exact) <= 4 * math.sqrt(p_exact * (1 - p_exact) / replicates)


def test_the_reason_says_in_words_which_side_passes_more_before_the_numbers() -> None:
    helped = decide(SEED, runs(14, 6), runs(18, 2), DAY)
    assert "the edit passes 20 points more than the base (18/20 vs 14/20)" in helped.reason
    assert "drop -" not in helped.reason
    hurt = decide(SEED, runs(20, 0), runs(16, 4), DAY)
    assert "the edit passes 20 points less than the base (16/20 vs 20/20)" in hurt.reason
    assert "regression z = 2.11, rolled back at 2.10 or more" in hurt.reason
