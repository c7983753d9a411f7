"""case_prior: the empirical-Bayes per-case rates behind a gate decision's recorded error rates."""

from __future__ import annotations

import numpy as np
from scipy.special import betaln

from lousho.analysis import case_prior
from lousho.analysis.paired_operating import case_rates


def test_quadrature_is_exact_for_a_posteriors_moments_even_near_a_point_mass() -> None:
    for a, b in [(0.02, 0.3), (3.02, 1e-4), (0.1, 3.1), (500.0, 500.0), (3.5, 0.5)]:
        post = case_prior.CasePosteriors(np.array([a]), np.array([b]), a, b)
        for k in (1, 6, 12):
            exact = np.exp(betaln(a + k, b) - betaln(a, b))
            assert abs(post.expect(lambda p, k=k: p**k)[0] - exact) <= 1e-9 + 1e-9 * exact, (a, b, k)


def test_the_prior_fitted_to_many_cases_recovers_the_beta_they_came_from() -> None:
    rng = np.random.default_rng(2)
    for a, b in [(2.0, 5.0), (0.4, 0.3)]:
        x = rng.binomial(3, rng.beta(a, b, 4000))
        fa, fb = case_prior.fit_prior(x.astype(float), np.full(x.size, 3.0))
        assert abs(fa / (fa + fb) - a / (a + b)) < 0.03, (fa, fb)
        assert 0.7 < (fa + fb) / (a + b) < 1.4, (fa, fb)


def test_cases_alike_share_one_rate_and_the_posterior_means_say_so() -> None:
    x = np.random.default_rng(4).binomial(3, 0.5, 400)
    post = case_prior.posteriors(x.tolist(), [3] * x.size)
    # 3 runs a case barely show spread: the fit is at a + b = 33 here (0.5 +- 0.04), the plug-in at 0.125-0.875.
    assert post.prior_a + post.prior_b > 20
    assert max(post.means) - min(post.means) < 0.1


def test_fewer_than_three_cases_get_jeffreys_prior_whose_mean_is_the_plug_in() -> None:
    for passes in ([3], [0, 2], []):
        post = case_prior.posteriors(passes, [3] * len(passes))
        assert not post.fitted and (post.prior_a, post.prior_b) == case_prior.JEFFREYS
        assert np.allclose(post.means, case_rates(passes, [3] * len(passes)) or [0.5])
        assert "Jeffreys" in post.describe()


def test_draws_are_fixed_by_their_seed_and_follow_each_posterior() -> None:
    post = case_prior.posteriors([3, 3, 0, 1, 2, 3], [3] * 6)
    one, two = post.draws(20_000, 1), post.draws(20_000, 1)
    assert np.array_equal(one, two) and one.shape == (20_000, 6)
    assert np.allclose(one.mean(axis=0), post.means, atol=0.01)
