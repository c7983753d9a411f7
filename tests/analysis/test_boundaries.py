"""Monitor boundaries: the anchors' constants (improve-anchors §3.1) and an independent simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from lousho.analysis.boundaries import make_boundary
from lousho.analysis.errors import BadInputError
from lousho.kernel.errors import UsageError

LOOKS = (20, 40, 60)


def test_pocock_one_sided_constant_for_three_looks_is_1_992_at_alpha_0_05() -> None:
    boundary = make_boundary("pocock", LOOKS, 0.05)
    assert boundary.z == pytest.approx((1.992,) * 3, abs=5e-4)


def test_pocock_one_sided_constant_for_three_looks_is_2_289_at_alpha_0_025() -> None:
    boundary = make_boundary("pocock", LOOKS, 0.025)
    assert boundary.z == pytest.approx((2.289,) * 3, abs=5e-4)


@pytest.mark.parametrize(
    ("alpha", "expected"), [(0.05, (2.961, 2.094, 1.710)), (0.025, (3.471, 2.454, 2.004))]
)
def test_obrien_fleming_boundaries_match_the_anchors(
    alpha: float, expected: tuple[float, ...]
) -> None:
    assert make_boundary("obf", LOOKS, alpha).z == pytest.approx(expected, abs=5e-4)


def test_lan_demets_obf_spending_matches_the_anchors_boundaries_and_spend() -> None:
    boundary = make_boundary("spending", LOOKS, 0.05)
    assert boundary.z == pytest.approx((3.200, 2.141, 1.695), abs=5e-4)
    spent = boundary.normal_crossing().cumsum()
    assert spent == pytest.approx((0.0007, 0.016, 0.050), abs=5e-4)


def test_lan_demets_pocock_spending_matches_the_anchors_boundaries_and_spend() -> None:
    boundary = make_boundary("spending-pocock", LOOKS, 0.05)
    assert boundary.z == pytest.approx((2.002, 1.994, 1.980), abs=5e-4)
    spent = boundary.normal_crossing().cumsum()
    assert spent == pytest.approx((0.023, 0.038, 0.050), abs=5e-4)


def test_seed_rule_is_conservative_under_the_normal_model_at_0_0393() -> None:
    crossing = make_boundary("seed").normal_crossing()
    assert crossing.sum() == pytest.approx(0.0393, abs=5e-5)
    # A single look at 2.1 crosses 0.0179 of the time: three separate windows would give 5.3%.
    assert crossing[0] == pytest.approx(0.0179, abs=5e-5)
    assert 1 - (1 - crossing[0]) ** 3 == pytest.approx(0.0526, abs=5e-4)


def test_one_look_boundary_is_the_normal_quantile() -> None:
    for rule in ("pocock", "obf", "spending", "spending-pocock"):
        boundary = make_boundary(rule, (60,), 0.05)
        assert boundary.z[0] == pytest.approx(norm.isf(0.05), abs=1e-8)


@pytest.mark.parametrize("rule", ["pocock", "obf", "spending", "spending-pocock"])
@pytest.mark.parametrize("looks", [(20, 40, 60), (10, 25, 60, 100), (5, 200), (30, 31, 32)])
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.2])
def test_every_alpha_rule_spends_exactly_alpha_under_the_normal_model(
    rule: str, looks: tuple[int, ...], alpha: float
) -> None:
    boundary = make_boundary(rule, looks, alpha)
    assert boundary.normal_crossing().sum() == pytest.approx(alpha, abs=1e-6)


def test_spending_with_a_later_horizon_keeps_part_of_alpha() -> None:
    from lousho.analysis.boundaries import lan_demets

    bounds = lan_demets((20, 40), 0.05, "spending", horizon=60)
    boundary = make_boundary("spending", (20, 40, 60), 0.05)
    assert bounds == pytest.approx(boundary.z[:2], abs=1e-6)


def _simulated_crossing(
    z: tuple[float, ...], looks: tuple[int, ...], replicates: int, seed: int
) -> tuple[np.ndarray, float]:
    """P(first crossing at each look), by summing independent normal increments directly."""
    rng = np.random.default_rng(seed)
    fractions = np.asarray(looks, dtype=float) / looks[-1]
    steps = np.diff(np.concatenate([[0.0], fractions]))
    brownian = np.cumsum(rng.standard_normal((replicates, len(looks))) * np.sqrt(steps), axis=1)
    crossed = brownian / np.sqrt(fractions) >= np.asarray(z)
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    return np.array([(first == k).mean() for k in range(len(looks))]), replicates


@pytest.mark.parametrize(
    ("rule", "alpha", "looks"),
    [("seed", None, LOOKS), ("pocock", 0.05, LOOKS), ("obf", 0.025, LOOKS),
     ("spending", 0.05, (10, 25, 60, 100))],
)
def test_normal_crossing_agrees_with_an_independent_simulation(
    rule: str, alpha: float | None, looks: tuple[int, ...]
) -> None:
    boundary = make_boundary(rule, looks, alpha)
    exact = boundary.normal_crossing()
    simulated, n = _simulated_crossing(boundary.z, looks, 400_000, seed=20251129)
    for p_exact, p_sim in zip(exact, simulated, strict=True):
        se = math.sqrt(p_exact * (1 - p_exact) / n)
        assert abs(p_sim - p_exact) <= 4 * se + 1e-6


def test_boundary_stops_only_with_both_the_z_and_a_drop_over_min_drop() -> None:
    # A low z bar makes the drop clause the one that binds: 20 vs 19 passes is a drop of exactly
    # 0.05, which is not *over* 0.05; 20 vs 18 is.
    boundary = make_boundary("seed", (20,), z=0.5, min_drop=0.05)
    assert not boundary.stops(0, 20, 19)
    assert boundary.stops(0, 20, 18)
    assert not boundary.stops(0, 18, 20)


def test_seed_boundary_stops_exactly_where_z_reaches_2_1() -> None:
    boundary = make_boundary("seed")
    xb, xa = np.meshgrid(np.arange(21), np.arange(21), indexing="ij")
    pooled = (xb + xa) / 40
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(pooled * (1 - pooled) > 0, (xb - xa) / 20 / np.sqrt(pooled * (1 - pooled) / 10), 0)
    expected = (z >= 2.1) & (xb - xa >= 2)
    assert np.array_equal(boundary.stops(0, xb, xa), expected)
    # 20 v 16 of 20: z = 0.2 / sqrt(0.9 * 0.1 / 10) = 2.108; 20 v 17: z = 1.80.
    assert boundary.stops(0, 20, 16) and not boundary.stops(0, 20, 17)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"rule": "pocock", "looks": (40, 20)}, "looks"),
        ({"rule": "pocock", "looks": (20, 20, 60)}, "looks"),
        ({"rule": "pocock", "looks": (0, 20)}, "looks"),
        ({"rule": "pocock", "looks": ()}, "looks"),
        ({"rule": "pocock", "looks": (20, 5000)}, "looks"),
        ({"rule": "pocock", "alpha": 1.5}, "alpha"),
        ({"rule": "obf", "alpha": 0.0}, "alpha"),
        ({"rule": "seed", "alpha": 0.05}, "alpha"),
        ({"rule": "wald"}, "rule"),
        ({"rule": "seed", "min_drop": 1.0}, "min_drop"),
        ({"rule": "pocock", "horizon": 90}, "horizon"),
        ({"rule": "spending", "horizon": 30}, "horizon"),
    ],
)
def test_bad_boundary_arguments_are_usage_errors(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(BadInputError) as caught:
        make_boundary(**kwargs)  # type: ignore[arg-type]
    assert isinstance(caught.value, UsageError)
    assert caught.value.name == name
    assert caught.value.code == "LOUSHO_STATS_BAD_INPUT"
