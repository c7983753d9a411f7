"""The false-accept rates a gate decision records, against the true rates, on simulated base runs (issue 27).

A decision sees 3 base runs per case and records P(accept | no effect) from them. Here the gates' own
``training_rates`` record a rate from every way a mix's base runs can come out, and the mean record, weighted
by each outcome's probability, is set against the true rate at the mix's per-case rates (the seeds' rule
exactly, the paired test by 200,000 replicates of its conditional Monte Carlo). The record depends on the
runs only through the multiset of per-case passes, so the outcomes are the multisets, most likely first, until
they cover 99.9% of the probability: the mean is exact up to that last 0.1% (at most 0.001 times the largest
record, 0.083 for the seeds' rule here and about 0.05 for the paired test: under 0.4% of any true rate) and,
for the paired gate, the Monte Carlo error of each record (its s.e., stated by the record, about 3% of the
rate with the 10,000 replicates used here to stay fast; every record uses the same seeds, so those errors
do not average out and are allowed in full, 3 s.e.).

The old record, the rate at the plug-in estimates (x + 1/2)/(n + 1), is computed on the same outcomes.
What 3 runs a case can and cannot support: each rule's rate is of degree 6 or more in a case's rate, so no
estimator from 3 runs is unbiased for every vector; the empirical-Bayes record (``case_prior``) is right
where the cases look like draws from one Beta and off where they cluster (easy/hard, half deterministic).
The assertions state the measured bias, not a target it was tuned to.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.stats import binom

from lousho.analysis import gate_operating as oc
from lousho.analysis import paired_operating as po
from lousho.analysis.gates import DEFAULT_RULES
from lousho.analysis.paired import DEFAULT_PAIRED
from lousho.improve import gate, paired_gate
from lousho.improve.records import RunRecord

RUNS = 3  # the gate's base runs per case (GATE_REPEATS)
COVER = 0.999  # the share of the base runs' outcomes the mean is taken over
REPLICATES = 10_000  # the paired records' conditional Monte Carlo here (a decision uses 20,000)
MIXES = {
    "easy/hard 70/30": np.array([0.97] * 7 + [0.55] * 3),
    "beta(0.3, 0.7), 12 cases": np.random.default_rng(3).beta(0.3, 0.7, 12),
    "half deterministic, 8 cases": np.array([1.0, 0.0, 1.0, 1.0, 0.5, 0.3, 0.7, 0.9]),
}


@dataclass(frozen=True)
class Records:
    """One gate's mean record over the outcomes: the new (empirical Bayes) and the old (plug-in), and the truth."""

    true: float
    new: float
    old: float
    se: float = 0.0  # the records' Monte Carlo s.e., relative to the true rate

    def bias(self) -> float:
        return self.new / self.true - 1.0

    def old_bias(self) -> float:
        return self.old / self.true - 1.0

    def within(self, tolerance: float) -> bool:
        """Mean record within ``tolerance`` (relative) of the truth, allowing 3 s.e. and the uncovered outcomes."""
        return abs(self.bias()) <= tolerance + 3 * self.se + 0.004


def outcomes(rates: np.ndarray) -> list[tuple[tuple[int, ...], float]]:
    """The multisets of per-case passes and their probabilities, most likely first, covering ``COVER``."""
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for p in rates:
        pmf = binom.pmf(np.arange(RUNS + 1), RUNS, p)
        grown: dict[tuple[int, ...], float] = {}
        for key, mass in law.items():
            for x in np.flatnonzero(pmf):
                k = tuple(sorted((*key, int(x))))
                grown[k] = grown.get(k, 0.0) + mass * pmf[x]
        law = grown
    ranked = sorted(law.items(), key=lambda kv: -kv[1])
    covered = np.cumsum([m for _, m in ranked])
    return ranked[: int(np.searchsorted(covered, COVER)) + 1]


def _base(passes: tuple[int, ...]) -> dict[str, list[RunRecord]]:
    return {f"case {i}": [RunRecord(f"case {i}", "r", j, "pass" if j < x else "fail") for j in range(RUNS)]
            for i, x in enumerate(passes)}


@pytest.fixture(scope="module")
def fewer_replicates() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(paired_gate, "RATE_REPLICATES", REPLICATES)
        yield


pytestmark = pytest.mark.usefixtures("fewer_replicates")

_RECORDS: dict[str, tuple[Records, Records]] = {}


def records(name: str) -> tuple[Records, Records]:
    """(the seeds' gate, the paired gate) on one mix; made once per mix and shared by the tests."""
    if name not in _RECORDS:
        _RECORDS[name] = _measure(MIXES[name])
    return _RECORDS[name]


def _measure(rates: np.ndarray) -> tuple[Records, Records]:
    law = outcomes(rates)
    weights = np.array([m for _, m in law])
    weights /= weights.sum()
    values = np.array([_record(x) for x, _ in law])  # outcomes x (new seed, new paired, old seed, old paired, se)
    new_seed, new_paired, old_seed, old_paired, se = weights @ values
    true_seed = oc.training_gate_rate([(p, p) for p in rates])
    true_paired = po.false_accept_rate(rates, replicates=200_000).rate
    return (Records(true_seed, new_seed, old_seed),
            Records(true_paired, new_paired, old_paired, se / true_paired))


def _record(passes: tuple[int, ...]) -> list[float]:
    base = _base(passes)
    seed = gate.training_rates(base, DEFAULT_RULES)[0]
    paired = paired_gate.training_rates(base, DEFAULT_PAIRED, 1)[0]
    plug_in = po.case_rates(list(passes), [RUNS] * len(passes))
    return [seed.value, paired.value, oc.training_gate_rate([(p, p) for p in plug_in]),
            po.false_accept_rate(plug_in, replicates=REPLICATES).rate, float(paired.method.rsplit("s.e. ", 1)[1])]


@pytest.mark.parametrize("name", ["beta(0.3, 0.7), 12 cases"])
def test_the_seeds_recorded_rate_is_within_10_percent_where_the_cases_look_like_one_beta(name: str) -> None:
    seed, _ = records(name)
    assert seed.within(0.10), seed
    assert seed.old_bias() < -0.5, seed  # the plug-in is 2.8 times low


@pytest.mark.parametrize("name", ["easy/hard 70/30", "half deterministic, 8 cases"])
def test_the_seeds_recorded_rate_is_about_30_percent_low_on_clustered_cases_the_plug_in_60(name: str) -> None:
    seed, _ = records(name)
    assert -0.36 <= seed.bias() <= -0.22, seed
    assert seed.old_bias() <= -0.55, seed.old_bias()
    assert not seed.within(0.10)


@pytest.mark.parametrize("name", ["beta(0.3, 0.7), 12 cases", "half deterministic, 8 cases"])
def test_the_paired_recorded_rate_is_within_10_percent_on_two_mixes(name: str) -> None:
    _, paired = records(name)
    assert paired.within(0.10), paired


def test_the_paired_recorded_rate_is_10_to_14_percent_low_on_the_easy_hard_mix_the_plug_in_as_high() -> None:
    _, paired = records("easy/hard 70/30")
    assert -0.20 <= paired.bias() <= -0.08, paired
    assert 0.06 <= paired.old_bias() <= 0.25, paired.old_bias()  # the plug-in errs high by about as much


def test_the_plug_in_fails_the_10_percent_check_on_every_mix_for_the_seeds_rule() -> None:
    for name in MIXES:
        seed, _ = records(name)
        assert not Records(seed.true, seed.old, seed.old).within(0.10), (name, seed)


def test_the_same_runs_give_the_same_record_and_the_record_says_how_it_was_estimated() -> None:
    base = _base((3, 3, 0, 1, 2, 3, 3, 2))
    for rates in (lambda: gate.training_rates(base, DEFAULT_RULES), lambda: gate.held_out_rates(base, DEFAULT_RULES),
                  lambda: paired_gate.training_rates(base, DEFAULT_PAIRED, 2),
                  lambda: paired_gate.held_out_rates(base, DEFAULT_PAIRED)):
        first, again = rates(), rates()
        assert first == again
        assert "fitted by maximum marginal likelihood" in first[0].model and "posterior" in first[0].model
    assert "seed 1" in paired_gate.training_rates(base, DEFAULT_PAIRED, 2)[0].model


@pytest.mark.parametrize("name", list(MIXES))
def test_with_the_true_set_of_rates_as_prior_the_seeds_record_is_within_10_percent(name: str) -> None:
    """The gap on clustered mixes is the Beta prior's fit from 8-12 cases of 3 runs, not the posterior mean:
    given the mix's own rates as the prior (not which case has which), the same record is 1-7% low."""
    rates = MIXES[name]
    worse, helped = oc.training_case_laws(rates, rates)
    true = float(np.prod(1 - worse) - np.prod(1 - worse - helped))
    law = outcomes(rates)
    mean = 0.0
    for passes, mass in law:
        post = binom.pmf(np.array(passes)[:, None], RUNS, rates[None, :])
        post /= post.sum(axis=1, keepdims=True)
        mean += mass * float(np.prod(post @ (1 - worse)) - np.prod(post @ (1 - worse - helped)))
    mean /= sum(mass for _, mass in law)
    assert -0.10 <= mean / true - 1 <= 0.0, (mean, true)
