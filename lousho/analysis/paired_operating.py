"""Operating characteristics of the paired gate and the seeds' gate, for any vector of per-case rates.

``simulate_gate`` plays the whole gate (both stages, the held-out test, ``candidates`` tried in turn against
one shared set of base runs, stopping at the first accepted) on many replicates at once, with numpy; the
p-values come from the same cached exact laws as ``paired`` (``null_pmf``), and the simulator's decisions
are checked against ``paired.stage_one``/``stage_two`` stream by stream in the tests.

``false_accept_rate`` is the rate a decision records: P(one candidate passes the training test | no
effect) at the per-case base rates, by conditional Monte Carlo. Given each case's totals the candidate's
passes are hypergeometric whatever the rates, so the stage-1 acceptance is computed exactly given the
totals (the test's attained size) and stage 2 exactly given stage 1 and the stage-2 totals: only the
totals are sampled, which leaves a standard error far below a plain simulation's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lousho.analysis import _checks
from lousho.analysis.errors import BadInputError
from lousho.analysis.gates import DEFAULT_RULES, GateRules
from lousho.analysis.paired import DEFAULT_PAIRED, SLACK, PairedRules, hypergeometric_pmf

Int = NDArray[np.int64]


@dataclass(frozen=True)
class GateSimulation:
    """Simulated gate: P(some candidate accepted), its standard error, and the agent runs it spent."""

    accept: float
    se: float
    runs: float  # mean agent runs per step, both sides, training and held-out
    replicates: int


@dataclass(frozen=True)
class EstimatedRate:
    rate: float
    se: float
    replicates: int


# --- vectorised exact p-values (one row per replicate) ---


def _laws(totals: Int, runs: int) -> tuple[NDArray[np.float64], Int]:
    """Per row, the null law of sum C over its cases: (one pmf per distinct multiset, row -> pmf index).

    The same law as ``paired.null_pmf``, for all distinct multisets at once: the law is a product of
    generating polynomials, one per case, so in Fourier space it is ``prod_t F_t ** count_t``. Rounding
    leaves errors near 1e-16, far below any level the rules compare with (they allow 1e-9 relative).
    """
    counts = (totals[..., None] == np.arange(2 * runs + 1)).sum(axis=-2)
    keys, inverse = np.unique(counts, axis=0, return_inverse=True)
    width = runs * totals.shape[-1] + 1
    size = 1 << max(int(width - 1).bit_length(), 1)
    spectra = np.fft.rfft([hypergeometric_pmf(runs, t) for t in range(2 * runs + 1)], n=size)
    product = np.ones((len(keys), spectra.shape[1]), dtype=complex)
    for total in range(2 * runs + 1):
        product *= spectra[total] ** keys[:, total, None]
    pmfs = np.clip(np.fft.irfft(product, n=size)[:, :width], 0.0, None)
    return pmfs, inverse.reshape(-1)


def upper_p_arrays(base: ArrayLike, candidate: ArrayLike, runs: int) -> NDArray[np.float64]:
    """``paired.upper_p`` on rows of cases (replicates x cases)."""
    b, c = np.asarray(base, dtype=np.int64), np.asarray(candidate, dtype=np.int64)
    pmfs, inverse = _laws(b + c, runs)
    tails = np.cumsum(pmfs[:, ::-1], axis=1)[:, ::-1]
    return np.minimum(tails[inverse, c.sum(axis=1)], 1.0)


def lower_p_arrays(base: ArrayLike, candidate: ArrayLike, runs: int) -> NDArray[np.float64]:
    """``paired.lower_p`` on rows of cases (replicates x cases)."""
    b, c = np.asarray(base, dtype=np.int64), np.asarray(candidate, dtype=np.int64)
    pmfs, inverse = _laws(b + c, runs)
    return np.minimum(np.cumsum(pmfs, axis=1)[inverse, c.sum(axis=1)], 1.0)


def stage_verdicts(b1: Int, c1: Int, b2: Int, c2: Int, rules: PairedRules, candidates: int) -> tuple[NDArray, NDArray]:
    """(accepted, went to stage 2) per row; b2, c2 are the stage-2 increments (cumulative = b1 + b2)."""
    a1, a2 = rules.levels(candidates)
    p1 = upper_p_arrays(b1, c1, rules.runs[0])
    ahead = c1.sum(axis=1) > b1.sum(axis=1)
    first = p1 <= a1 * SLACK
    go_on = ~first & (p1 <= rules.go_on * SLACK) & ahead
    accepted = first.copy()
    if go_on.any():
        rows = np.flatnonzero(go_on)
        p2 = upper_p_arrays(b1[rows] + b2[rows], c1[rows] + c2[rows], rules.runs[1])
        accepted[rows] = p2 <= a2 * SLACK
    return accepted, go_on


# --- the whole gate, simulated ---


def simulate_gate(
    p_base: ArrayLike,
    p_candidate: ArrayLike,
    *,
    held_out: ArrayLike = (),
    held_out_candidate: ArrayLike | None = None,
    gate: str = "paired",
    candidates: int = 1,
    rules: PairedRules = DEFAULT_PAIRED,
    seed_rules: GateRules = DEFAULT_RULES,
    replicates: int = 20_000,
    seed: int = 0,
) -> GateSimulation:
    """P(the step accepts some candidate) when every candidate has the per-case rates ``p_candidate``.

    Candidates are tried in turn against one set of base runs (as ``improve.gate.Gate`` does) and the
    first accepted ends the step. Held-out cases (``held_out`` base rates; the candidate's default to the
    same) are run only for a candidate the training test accepted. ``gate`` is "paired" or "seed".
    """
    pb, pc = _rates(p_base), _rates(p_candidate)
    if pb.size != pc.size:
        raise BadInputError("p_candidate", pc.tolist(), f"one rate per case ({pb.size})")
    hb = _rates(held_out) if np.size(held_out) else np.zeros(0)
    hc = hb if held_out_candidate is None else _rates(held_out_candidate)
    c = _checks.positive_int("candidates", candidates)
    rng = np.random.default_rng(seed)
    r1, r2 = rules.runs[0], rules.runs[1] - rules.runs[0]
    shape, hshape = (replicates, pb.size), (replicates, hb.size)
    runs_seed = seed_rules.runs
    base1 = rng.binomial(r1 if gate == "paired" else runs_seed, pb, shape)
    base2 = rng.binomial(r2, pb, shape)
    hbase1 = rng.binomial(r1 if gate == "paired" else runs_seed, hb, hshape)
    hbase2 = rng.binomial(seed_rules.rerun, hb, hshape)
    done = np.zeros(replicates, dtype=bool)
    runs = np.full(replicates, (r1 if gate == "paired" else runs_seed) * pb.size, dtype=float)
    second_base = np.zeros(replicates, dtype=bool)
    held_base = np.zeros(replicates, dtype=bool)
    rerun_base = np.zeros(hshape, dtype=bool)
    for _ in range(c):
        tried = ~done
        if gate == "paired":
            c1, c2 = rng.binomial(r1, pc, shape), rng.binomial(r2, pc, shape)
            train, went = stage_verdicts(base1, c1, base2, c2, rules, c)
            runs += tried * (r1 * pb.size + went * r2 * pb.size)
            second_base |= tried & went
        else:
            c1 = rng.binomial(runs_seed, pc, shape)
            train = _seed_training(base1, c1, seed_rules)
            runs += tried * runs_seed * pb.size
        ok = train.copy()
        if hb.size:
            reach = tried & train
            hcand = rng.binomial(r1 if gate == "paired" else runs_seed, hc, hshape)
            runs += reach * hcand.shape[1] * (r1 if gate == "paired" else runs_seed)
            held_base |= reach
            if gate == "paired":
                ok &= lower_p_arrays(hbase1, hcand, r1) > rules.held_out_alpha * SLACK
            else:
                drop = hcand < hbase1
                hrerun = rng.binomial(seed_rules.rerun, hc, hshape)
                runs += reach * (drop.sum(axis=1) * seed_rules.rerun)
                rerun_base |= reach[:, None] & drop
                pooled = (hbase1 + hbase2) - (hcand + hrerun)
                ok &= ~(drop & (pooled >= seed_rules.held_out_min_drop)).any(axis=1)
        done |= tried & ok
    runs += second_base * r2 * pb.size
    if hb.size:
        runs += held_base * hb.size * (r1 if gate == "paired" else runs_seed)
        runs += rerun_base.sum(axis=1) * seed_rules.rerun  # the base reruns a dropped case once
    accept = float(done.mean())
    return GateSimulation(accept, float(np.sqrt(accept * (1 - accept) / replicates)), float(runs.mean()),
                          replicates)


def _seed_training(base: Int, candidate: Int, rules: GateRules) -> NDArray[np.bool_]:
    """The seeds' training rule on rows: some case passes >= min_gain more, none passes fewer."""
    diff = candidate - base
    return (diff >= rules.min_gain).any(axis=1) & ~(diff < 0).any(axis=1)


# --- the rate a decision records ---


def false_accept_rate(
    p_base: ArrayLike,
    rules: PairedRules = DEFAULT_PAIRED,
    *,
    candidates: int = 1,
    replicates: int = 20_000,
    seed: int = 0,
) -> EstimatedRate:
    """P(one candidate passes the paired training test | no effect), at per-case rates ``p_base``.

    Conditional Monte Carlo: only each case's totals are sampled; given them the acceptance is exact.
    """
    p = _rates(p_base)
    rng = np.random.default_rng(seed)
    r1, r2 = rules.runs[0], rules.runs[1] - rules.runs[0]
    a1, a2 = rules.levels(candidates)
    shape = (replicates, p.size)
    t1 = rng.binomial(2 * r1, p, shape)
    pmfs, inverse = _laws(t1, r1)
    tails = np.cumsum(pmfs[:, ::-1], axis=1)[:, ::-1]
    # Stage 1, exact given the totals: the attained size, the largest tail at or below the level.
    size1 = np.where(tails <= a1 * SLACK, tails, 0.0).max(axis=1)[inverse]
    # Stage 2: sample how the stage-1 totals split, keep the rows that go on, then exact given the
    # stage-2 totals: P(S2 >= the cumulative test's critical value - S1).
    c1 = rng.hypergeometric(t1, 2 * r1 - t1, r1)
    b1 = t1 - c1
    s1 = c1.sum(axis=1)
    p1 = np.minimum(tails[inverse, s1], 1.0)
    go_on = (p1 > a1 * SLACK) & (p1 <= rules.go_on * SLACK) & (s1 > b1.sum(axis=1))
    size2 = np.zeros(replicates)
    rows = np.flatnonzero(go_on)
    if rows.size:
        t2 = rng.binomial(2 * r2, p, (rows.size, p.size))
        cum_pmfs, cum_inv = _laws(t1[rows] + t2, rules.runs[1])
        cum_tails = np.cumsum(cum_pmfs[:, ::-1], axis=1)[:, ::-1]
        critical = (cum_tails > a2 * SLACK).sum(axis=1)[cum_inv]  # smallest S with tail <= a2
        inc_pmfs, inc_inv = _laws(t2, r2)
        inc_tails = np.cumsum(inc_pmfs[:, ::-1], axis=1)[:, ::-1]
        need = critical - s1[rows]
        inside = np.clip(need, 0, inc_tails.shape[1] - 1)
        size2[rows] = np.where(need <= 0, 1.0, np.where(need >= inc_tails.shape[1], 0.0,
                                                        inc_tails[inc_inv, inside]))
    values = size1 + size2
    return EstimatedRate(float(values.mean()), float(values.std(ddof=1) / np.sqrt(replicates)), replicates)


def held_out_false_reject(p_base: ArrayLike, rules: PairedRules = DEFAULT_PAIRED, *, replicates: int = 20_000,
                          seed: int = 0) -> EstimatedRate:
    """P(the held-out harm test rejects | no effect) at per-case rates: the attained size given the totals."""
    p = _rates(p_base)
    if not p.size:
        return EstimatedRate(0.0, 0.0, 0)
    rng = np.random.default_rng(seed)
    r = rules.runs[0]
    pmfs, inverse = _laws(rng.binomial(2 * r, p, (replicates, p.size)), r)
    heads = np.cumsum(pmfs, axis=1)
    size = np.where(heads <= rules.held_out_alpha * SLACK, heads, 0.0).max(axis=1)[inverse]
    return EstimatedRate(float(size.mean()), float(size.std(ddof=1) / np.sqrt(replicates)), replicates)


def case_rates(passes: Sequence[int], runs: Sequence[int]) -> list[float]:
    """Per-case pass rates from a few runs, (x + 1/2) / (n + 1): never exactly 0 or 1 from 3 runs."""
    return [(x + 0.5) / (n + 1.0) for x, n in zip(passes, runs, strict=True)]


def _rates(values: ArrayLike) -> NDArray[np.float64]:
    p = np.atleast_1d(np.asarray(values, dtype=float))
    if p.ndim != 1 or np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise BadInputError("rates", p.tolist(), "one pass rate per case, each between 0 and 1")
    return p
