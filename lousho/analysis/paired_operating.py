"""Operating characteristics of the paired gate and the seeds' gate, for any vector of per-case rates.

``simulate_gate`` plays the whole gate (both stages, the held-out test, ``candidates`` tried in turn against
one shared set of base runs, stopping at the first accepted) on many replicates at once, with numpy; the
p-values come from the same cached exact laws as ``paired`` (``null_pmf``), and the simulator's decisions
are checked against ``paired.stage_one``/``stage_two`` stream by stream in the tests.

``false_accept_rate`` is P(one candidate passes the training test | no effect) at the per-case base
rates, by conditional Monte Carlo. Given each case's totals the candidate's passes are hypergeometric
whatever the rates, so the stage-1 acceptance is computed exactly given the totals (the test's attained
size) and stage 2 exactly given stage 1 and the stage-2 totals: only the totals are sampled, which leaves
a standard error far below a plain simulation's. A decision records ``false_accept_given_totals``: the
same with its own stage-1 totals over both sides in place of sampled ones, so only stage 2's are drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

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


def _laws(totals: Int, runs: int) -> tuple[NDArray[np.float64], Int, Int]:
    """Per row, the null law of sum C over its cases: (pmfs, row -> pmf index, row's shift).

    The same law as ``paired.null_pmf``, for all rows at once. A case with total t > r behaves as one with
    2r - t shifted by t - r (its failures split as the passes would), so a row's law is that of its
    classes min(t, 2r - t), shifted: far fewer distinct laws than multisets. Each law is a product of
    generating polynomials, so in Fourier space ``exp(sum_k n_k log F_k)``: one matrix product. Rounding
    leaves errors near 1e-16, far below what the rules compare (they allow 1e-9 relative).
    """
    kind = np.minimum(totals, 2 * runs - totals)
    shift = np.maximum(totals - runs, 0).sum(axis=1)
    bins = runs + 1
    radix = kind.shape[1] + 1
    if radix ** bins < 2**63:
        # A row's multiset of kinds as one number, its count of kind k the digit k in base cases + 1: a third
        # of the time of counting kinds per row first, and the counts are needed only for the distinct laws.
        codes = (radix ** np.arange(bins, dtype=np.int64))[kind].sum(axis=1)
        _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        keys = np.stack([(kind[first] == k).sum(axis=1) for k in range(1, bins)], axis=1).astype(float)
    else:  # too many cases for a code in 64 bits: the rows of counts themselves
        offsets = kind + bins * np.arange(kind.shape[0])[:, None]
        counts = np.bincount(offsets.ravel(), minlength=bins * kind.shape[0]).reshape(-1, bins)
        unique, inverse = np.unique(counts[:, 1:], axis=0, return_inverse=True)
        keys = unique.astype(float)
    width = runs * kind.shape[1] + 1
    size = 1 << max(int(width - 1).bit_length(), 1)
    logs = _log_spectra(runs, size)
    # exp(a + ib) as exp(a)(cos b + i sin b): the same values, and numpy's complex exp is six times slower.
    real, imag = keys @ logs.real, keys @ logs.imag
    pmfs = np.clip(np.fft.irfft(np.exp(real) * (np.cos(imag) + 1j * np.sin(imag)), n=size)[:, :width], 0.0, None)
    return pmfs, inverse.reshape(-1), shift


@lru_cache(maxsize=64)
def _log_spectra(runs: int, size: int) -> NDArray[np.complex128]:
    """The logs of the per-kind laws' Fourier transforms: the same few for every call (read-only, shared)."""
    spectra = np.fft.rfft([hypergeometric_pmf(runs, k) for k in range(1, runs + 1)], n=size)
    logs = np.log(np.where(spectra == 0, 1e-300, spectra))
    logs.flags.writeable = False
    return logs


def _tails(pmfs: NDArray[np.float64]) -> NDArray[np.float64]:
    """tails[i, s] = P(S >= s) for s = 0..width (the last column 0)."""
    out = np.zeros((pmfs.shape[0], pmfs.shape[1] + 1))
    out[:, :-1] = np.cumsum(pmfs[:, ::-1], axis=1)[:, ::-1]
    return out


def upper_p_arrays(base: ArrayLike, candidate: ArrayLike, runs: int) -> NDArray[np.float64]:
    """``paired.upper_p`` on rows of cases (replicates x cases)."""
    b, c = np.asarray(base, dtype=np.int64), np.asarray(candidate, dtype=np.int64)
    pmfs, inverse, shift = _laws(b + c, runs)
    return np.minimum(_tails(pmfs)[inverse, c.sum(axis=1) - shift], 1.0)


def lower_p_arrays(base: ArrayLike, candidate: ArrayLike, runs: int) -> NDArray[np.float64]:
    """``paired.lower_p`` on rows of cases (replicates x cases)."""
    b, c = np.asarray(base, dtype=np.int64), np.asarray(candidate, dtype=np.int64)
    pmfs, inverse, shift = _laws(b + c, runs)
    return np.minimum(np.cumsum(pmfs, axis=1)[inverse, c.sum(axis=1) - shift], 1.0)


def held_out_p_arrays(base: Int, candidate: Int, runs: int) -> NDArray[np.float64]:
    """``paired.held_out_harm``'s p on rows: the stratified p or m times the smallest per-case p."""
    pooled = lower_p_arrays(base, candidate, runs)
    cdf = np.cumsum([hypergeometric_pmf(runs, t) for t in range(2 * runs + 1)], axis=1)
    single = np.minimum(cdf[base + candidate, candidate], 1.0).min(axis=1) * base.shape[1]
    return np.minimum(np.minimum(pooled, single), 1.0)


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
    rows = (replicates, 1)
    done, runs = simulate_rows(np.tile(pb, rows), np.tile(pc, rows), np.tile(hb, rows), np.tile(hc, rows),
                               gate=gate, candidates=candidates, rules=rules, seed_rules=seed_rules, seed=seed)
    accept = float(done.mean())
    return GateSimulation(accept, float(np.sqrt(accept * (1 - accept) / replicates)), float(runs.mean()),
                          replicates)


def simulate_rows(
    pb: NDArray[np.float64],
    pc: NDArray[np.float64],
    hb: NDArray[np.float64],
    hc: NDArray[np.float64],
    *,
    gate: str = "paired",
    candidates: int = 1,
    rules: PairedRules = DEFAULT_PAIRED,
    seed_rules: GateRules = DEFAULT_RULES,
    seed: int = 0,
) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """One replicate per row, each with its own per-case rates (replicates x cases; held-out ``hb``, ``hc``
    may have no columns): (some candidate accepted, agent runs spent) per row. Many rate vectors of one size
    go in one call, so a grid of them costs one pass of numpy."""
    if gate not in ("paired", "seed"):
        raise BadInputError("gate", gate, "paired or seed")
    c = _checks.positive_int("candidates", candidates)
    rng = np.random.default_rng(seed)
    paired = gate == "paired"
    r1 = rules.runs[0] if paired else seed_rules.runs
    r2 = rules.runs[1] - rules.runs[0]
    n, nh = pb.shape[1], hb.shape[1]
    base1, base2 = rng.binomial(r1, pb), rng.binomial(r2, pb)
    hbase1, hbase2 = rng.binomial(r1, hb), rng.binomial(seed_rules.rerun, hb)
    replicates = pb.shape[0]
    done = np.zeros(replicates, dtype=bool)
    runs = np.full(replicates, float(r1 * n))
    second_base = np.zeros(replicates, dtype=bool)
    held_base = np.zeros(replicates, dtype=bool)
    rerun_base = np.zeros(hb.shape, dtype=bool)
    for _ in range(c):
        tried = ~done
        c1 = rng.binomial(r1, pc)
        if paired:
            train, went = stage_verdicts(base1, c1, base2, rng.binomial(r2, pc), rules, c)
            runs += tried * (r1 * n + went * r2 * n)
            second_base |= tried & went
        else:
            train = _seed_training(base1, c1, seed_rules)
            runs += tried * r1 * n
        ok = train.copy()
        if nh:
            reach = tried & train
            hcand = rng.binomial(r1, hc)
            runs += reach * nh * r1
            held_base |= reach
            if paired:
                ok &= held_out_p_arrays(hbase1, hcand, r1) > rules.held_out_alpha * SLACK
            else:
                drop = hcand < hbase1
                hrerun = rng.binomial(seed_rules.rerun, hc)
                runs += reach * (drop.sum(axis=1) * seed_rules.rerun)
                rerun_base |= reach[:, None] & drop
                pooled = (hbase1 + hbase2) - (hcand + hrerun)
                ok &= ~(drop & (pooled >= seed_rules.held_out_min_drop)).any(axis=1)
        done |= tried & ok
    runs += second_base * r2 * n
    runs += held_base * nh * r1
    runs += rerun_base.sum(axis=1) * seed_rules.rerun  # the base reruns a dropped case once
    return done, runs


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
    return false_accept_rows(np.broadcast_to(p, (replicates, p.size)), rules, candidates=candidates, seed=seed)


def false_accept_rows(p_rows: NDArray[np.float64], rules: PairedRules = DEFAULT_PAIRED, *, candidates: int = 1,
                      seed: int = 0) -> EstimatedRate:
    """``false_accept_rate`` with its own per-case rates on each replicate (replicates x cases), e.g. rates
    drawn from each case's posterior: the mean is then the posterior-predictive P(accept | no effect)."""
    p = _rate_rows(p_rows)
    rng = np.random.default_rng(seed)
    t1 = rng.binomial(2 * rules.runs[0], p)
    return _estimate(_accept_given_totals(t1, p, rules, candidates, rng))


def false_accept_given_totals(totals: ArrayLike, p_rows: NDArray[np.float64], rules: PairedRules = DEFAULT_PAIRED,
                              *, candidates: int = 1, seed: int = 0) -> EstimatedRate:
    """P(one candidate passes the paired training test | no effect, each case's stage-1 total ``totals``).

    Under no effect a case's 2 r1 stage-1 runs are exchangeable whatever its rate, so given the totals
    stage 1 is exact and free of the rates (the test's attained size), and so is the law of the candidate's
    stage-1 sum S1: stage 2 is summed over it exactly, not sampled. Only stage 2's totals need rates: each
    replicate draws them at its own row of ``p_rows`` (e.g. the cases' posteriors given the totals). Averaged
    over the totals' law the stage-1 part is the unconditional stage-1 rate for every vector of per-case rates;
    only the stage-2 part rests on the rows.
    """
    p = _rate_rows(p_rows)
    t1 = np.asarray(totals, dtype=np.int64)
    if t1.size == 0:
        return EstimatedRate(0.0, 0.0, p.shape[0])  # no cases: the candidate cannot come out ahead
    r1, r2 = rules.runs[0], rules.runs[1] - rules.runs[0]
    if t1.shape != (p.shape[1],) or np.any((t1 < 0) | (t1 > 2 * r1)):
        raise BadInputError("totals", t1.tolist(), f"one stage-1 total per case, each in 0..{2 * r1}")
    a1, a2 = rules.levels(candidates)
    pmfs, _, shift = _laws(t1[None, :], r1)
    tails = _tails(pmfs)[0]
    size1 = float(np.where(tails <= a1 * SLACK, tails, 0.0).max())
    # The S1 that go on: not accepted at stage 1, within the go-on level, the candidate ahead (2 S1 > T1).
    s1 = shift[0] + np.arange(pmfs.shape[1])
    go_on = (tails[:-1] > a1 * SLACK) & (tails[:-1] <= rules.go_on * SLACK) & (2 * s1 > t1.sum()) & (pmfs[0] > 0)
    if not go_on.any():
        return EstimatedRate(size1, 0.0, p.shape[0])
    rng = np.random.default_rng(seed)
    t2 = rng.binomial(2 * r2, p)
    cum_pmfs, cum_inv, cum_shift = _laws(t1[None, :] + t2, rules.runs[1])
    # The smallest cumulative S whose tail is at most the level, back in S's own coordinates.
    critical = (_tails(cum_pmfs) > a2 * SLACK).sum(axis=1)[cum_inv] + cum_shift
    inc_pmfs, inc_inv, inc_shift = _laws(t2, r2)
    inc_tails = _tails(inc_pmfs)
    need = critical[:, None] - s1[go_on][None, :] - inc_shift[:, None]  # in the increment's shifted coordinates
    inside = np.clip(need, 0, inc_tails.shape[1] - 1)
    accept2 = np.where(need <= 0, 1.0, inc_tails[inc_inv[:, None], inside])
    return _estimate(size1 + accept2 @ pmfs[0][go_on])


def _accept_given_totals(t1: Int, p: NDArray[np.float64], rules: PairedRules, candidates: int,
                         rng: np.random.Generator) -> NDArray[np.float64]:
    """Per row, P(accept | its stage-1 totals, one sampled split of them and its stage-2 totals drawn at p)."""
    r1, r2 = rules.runs[0], rules.runs[1] - rules.runs[0]
    a1, a2 = rules.levels(candidates)
    replicates = p.shape[0]
    pmfs, inverse, shift1 = _laws(t1, r1)
    tails = _tails(pmfs)
    # Stage 1, exact given the totals: the attained size, the largest tail at or below the level.
    size1 = np.where(tails <= a1 * SLACK, tails, 0.0).max(axis=1)[inverse]
    # Stage 2: sample how the stage-1 totals split, keep the rows that go on, then exact given the
    # stage-2 totals: P(S2 >= the cumulative test's critical value - S1).
    c1 = rng.hypergeometric(t1, 2 * r1 - t1, r1)
    b1 = t1 - c1
    s1 = c1.sum(axis=1)
    p1 = np.minimum(tails[inverse, s1 - shift1], 1.0)
    go_on = (p1 > a1 * SLACK) & (p1 <= rules.go_on * SLACK) & (s1 > b1.sum(axis=1))
    size2 = np.zeros(replicates)
    rows = np.flatnonzero(go_on)
    if rows.size:
        t2 = rng.binomial(2 * r2, p[rows])
        cum_pmfs, cum_inv, cum_shift = _laws(t1[rows] + t2, rules.runs[1])
        # The smallest cumulative S whose tail is at most the level, back in S's own coordinates.
        critical = (_tails(cum_pmfs) > a2 * SLACK).sum(axis=1)[cum_inv] + cum_shift
        inc_pmfs, inc_inv, inc_shift = _laws(t2, r2)
        inc_tails = _tails(inc_pmfs)
        need = critical - s1[rows] - inc_shift  # in the increment's shifted coordinates
        inside = np.clip(need, 0, inc_tails.shape[1] - 1)
        size2[rows] = np.where(need <= 0, 1.0, inc_tails[inc_inv, inside])
    return size1 + size2


def _estimate(values: NDArray[np.float64]) -> EstimatedRate:
    return EstimatedRate(float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size)), values.size)


def held_out_false_reject(p_base: ArrayLike, rules: PairedRules = DEFAULT_PAIRED, *, replicates: int = 20_000,
                          seed: int = 0) -> EstimatedRate:
    """P(the held-out tests reject | no effect) at per-case rates, simulated on the held-out runs alone."""
    p = _rates(p_base)
    if not p.size:
        return EstimatedRate(0.0, 0.0, 0)
    return held_out_false_reject_rows(np.broadcast_to(p, (replicates, p.size)), rules, seed=seed)


def held_out_false_reject_rows(p_rows: NDArray[np.float64], rules: PairedRules = DEFAULT_PAIRED, *,
                               seed: int = 0) -> EstimatedRate:
    """``held_out_false_reject`` with its own per-case rates on each replicate (replicates x cases)."""
    p = _rate_rows(p_rows)
    if not p.shape[1]:
        return EstimatedRate(0.0, 0.0, 0)
    rng = np.random.default_rng(seed)
    r, replicates = rules.runs[0], p.shape[0]
    base, cand = rng.binomial(r, p), rng.binomial(r, p)
    rejects = held_out_p_arrays(base, cand, r) <= rules.held_out_alpha * SLACK
    rate = float(rejects.mean())
    return EstimatedRate(rate, float(np.sqrt(rate * (1 - rate) / replicates)), replicates)


def case_rates(passes: Sequence[int], runs: Sequence[int]) -> list[float]:
    """Per-case pass rates from a few runs, (x + 1/2) / (n + 1): never exactly 0 or 1 from 3 runs."""
    return [(x + 0.5) / (n + 1.0) for x, n in zip(passes, runs, strict=True)]


def _rates(values: ArrayLike) -> NDArray[np.float64]:
    p = np.atleast_1d(np.asarray(values, dtype=float))
    if p.ndim != 1 or np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise BadInputError("rates", p.tolist(), "one pass rate per case, each between 0 and 1")
    return p


def _rate_rows(values: NDArray[np.float64]) -> NDArray[np.float64]:
    p = np.asarray(values, dtype=float)
    if p.ndim != 2 or np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise BadInputError("rates", p.shape, "one row of per-case pass rates per replicate, each between 0 and 1")
    return p
