"""Statistics that survive runs clustered in sessions: the cluster-robust (CR1) z, the Cochran–Mantel–Haenszel
z over strata, and a cluster-robust interval for one pass rate.

Runs of one session share a case and often an outcome, so they are not independent: with sessions of mean
size 3 the design effect is about 2, and a z or an interval that counts runs as independent is too sure of
itself (a Wilson interval by revision covers 74%, not 95%). Each function here takes a cluster label per
run (the session, else the case id, else the run itself) and measures the variance from the clusters.

Every ``*_rows`` form works on 2-D arrays, one replicate per row, so a simulation of 20,000 streams takes
seconds; the scalar forms are the same arithmetic on one row, so a simulation and the monitor cannot
disagree. Sign convention as in ``stats``: a positive z means the applied side passes *less* often.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import stdtrit

from lousho.analysis import _checks
from lousho.analysis.errors import BadInputError
from lousho.analysis.stats import pooled_z_arrays

# The degrees of freedom of the bound that takes all of alpha (``interval_from_cluster_sums``).
Degrees = Literal["clusters", "kurtosis"]


@dataclass(frozen=True)
class ClusteredInterval:
    """A pass rate with its cluster-robust interval; ``clusters`` counted, ``design_effect`` the variance
    ratio to independent runs (1: no clustering seen)."""

    estimate: float
    low: float
    high: float
    runs: int
    clusters: int
    design_effect: float


def cluster_ids(labels: Sequence[object]) -> NDArray[np.int64]:
    """Labels (session ids, case ids, anything hashable) as integers 0..G-1 in order of first appearance."""
    seen: dict[object, int] = {}
    return np.fromiter((seen.setdefault(label, len(seen)) for label in labels), dtype=np.int64, count=len(labels))


def cr1_z(base: ArrayLike, base_clusters: ArrayLike, applied: ArrayLike, applied_clusters: ArrayLike) -> float:
    """The cluster-robust z of base minus applied: ``(p_b - p_a) / sqrt(V_b + V_a)``.

    ``V = sum over clusters of (sum of residuals)^2 / n^2 * G / (G - 1)`` on each side, residuals about the
    *pooled* pass rate (so under no change the variance is estimated as a test would, not from each side's
    own mean), ``G`` the side's clusters. Clusters are labels per run; a cluster on both sides is counted on
    each side apart. A side with one cluster has no variance estimate, and no evidence comes of it: z = 0.
    """
    yb, gb = _side("base", base, base_clusters)
    ya, ga = _side("applied", applied, applied_clusters)
    y = np.concatenate([yb, ya])[None, :]
    g = np.concatenate([gb, ga + (gb.max() + 1 if gb.size else 0)])[None, :]
    mask_b = np.zeros(y.shape, dtype=bool)
    mask_b[0, : yb.size] = True
    return float(cr1_z_rows(y, g, mask_b, ~mask_b)[0])


def cr1_z_rows(y: NDArray, clusters: NDArray, base: NDArray, applied: NDArray) -> NDArray[np.float64]:
    """``cr1_z`` for every row: ``y`` 0/1 outcomes (R, L), ``clusters`` integer labels in [0, L) per row, and
    two boolean masks choosing each side's runs. A cluster label must not be on both sides of one row."""
    y = np.asarray(y, dtype=float)
    nb = base.sum(axis=1)
    na = applied.sum(axis=1)
    both = base | applied
    total = np.maximum(nb + na, 1)
    pooled = (y * both).sum(axis=1) / total
    vb, gb = _cluster_variance(y, clusters, base, pooled, nb)
    va, ga = _cluster_variance(y, clusters, applied, pooled, na)
    diff = (y * base).sum(axis=1) / np.maximum(nb, 1) - (y * applied).sum(axis=1) / np.maximum(na, 1)
    var = vb + va
    ok = (var > 0) & (gb > 1) & (ga > 1) & (nb > 0) & (na > 0)
    return np.where(ok, diff / np.sqrt(np.where(ok, var, 1.0)), 0.0)


def _cluster_variance(y: NDArray, clusters: NDArray, mask: NDArray, centre: NDArray,
                      n: NDArray) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    rows, width = y.shape
    offset = (np.arange(rows) * width)[:, None]
    index = (clusters + offset).ravel()
    residual = ((y - centre[:, None]) * mask).ravel()
    sums = np.bincount(index, weights=residual, minlength=rows * width).reshape(rows, width)
    members = np.bincount(index, weights=mask.ravel().astype(float), minlength=rows * width).reshape(rows, width)
    g = (members > 0).sum(axis=1)
    factor = np.where(g > 1, g / np.maximum(g - 1, 1), 0.0)
    return (sums * sums).sum(axis=1) / np.maximum(n, 1) ** 2 * factor, g


def design_effect_rows(y: NDArray, clusters: NDArray, mask: NDArray, centre: NDArray) -> NDArray[np.float64]:
    """The design effect of the masked runs of each row, never below 1: the CR1 variance of their residuals'
    sum over its variance as independent runs, ``G/(G-1) * sum_g (sum_i r_i)^2 / sum_i r_i^2``.

    ``centre`` (R, L) is each run's expected outcome under no change (the pooled rate, or its stratum's), so
    residuals from both sides of a comparison estimate one design effect together: a small side (a 20%
    holdback) gets the clustering measured on every run rather than on its own few sessions, which left a
    CR1 z on a small side anti-conservative (a base side that happens to pass every run has almost no
    residual variance about the pooled rate). Floored at 1: clustering may only widen, so the rule is never
    bolder than the pooled z it corrects.
    """
    y = np.asarray(y, dtype=float)
    rows, width = y.shape
    offset = (np.arange(rows) * width)[:, None]
    residual = (y - centre) * mask
    index = (clusters + offset).ravel()
    sums = np.bincount(index, weights=residual.ravel(), minlength=rows * width).reshape(rows, width)
    members = np.bincount(index, weights=mask.ravel().astype(float), minlength=rows * width).reshape(rows, width)
    g = (members > 0).sum(axis=1)
    iid = (residual * residual).sum(axis=1)
    clustered = (sums * sums).sum(axis=1) * np.where(g > 1, g / np.maximum(g - 1, 1), 1.0)
    return np.where(iid > 0, np.maximum(clustered / np.where(iid > 0, iid, 1.0), 1.0), 1.0)


def clustered_z_rows(y: NDArray, clusters: NDArray, base: NDArray, applied: NDArray) -> NDArray[np.float64]:
    """The pooled z of base minus applied over the square root of the two sides' common design effect
    (``design_effect_rows``, residuals about the pooled rate, clusters = sessions): the monitor's statistic
    on a concurrent comparison. Sides of any sizes; a cluster label must not be on both sides of one row."""
    y = np.asarray(y, dtype=float)
    nb, na = base.sum(axis=1), applied.sum(axis=1)
    xb, xa = (y * base).sum(axis=1), (y * applied).sum(axis=1)
    z = pooled_z_arrays(xb, np.maximum(nb, 1), xa, np.maximum(na, 1))
    pooled = (xb + xa) / np.maximum(nb + na, 1)
    deff = design_effect_rows(y, clusters, base | applied, np.broadcast_to(pooled[:, None], y.shape))
    return np.where((nb > 0) & (na > 0), z / np.sqrt(deff), 0.0)


def clustered_z(base: ArrayLike, base_clusters: ArrayLike, applied: ArrayLike, applied_clusters: ArrayLike) -> float:
    """``clustered_z_rows`` on one comparison: outcomes and a cluster label per run on each side."""
    y, g, mask_b = _one_row("base", base, base_clusters, "applied", applied, applied_clusters)
    return float(clustered_z_rows(y, g, mask_b, ~mask_b)[0])


def stratified_z_rows(y: NDArray, clusters: NDArray, strata: NDArray, base: NDArray, applied: NDArray,
                      strata_count: int) -> NDArray[np.float64]:
    """The CMH z over ``strata`` (integer labels in [0, strata_count)) over the square root of the design
    effect of its residuals about each stratum's pooled rate: a before/after comparison that removes a shift
    of the case mix and counts sessions as clusters."""
    y = np.asarray(y, dtype=float)
    both = base | applied
    xb = np.stack([(y * base * (strata == k)).sum(axis=1) for k in range(strata_count)], axis=1)
    xa = np.stack([(y * applied * (strata == k)).sum(axis=1) for k in range(strata_count)], axis=1)
    nb = np.stack([(base & (strata == k)).sum(axis=1) for k in range(strata_count)], axis=1).astype(float)
    na = np.stack([(applied & (strata == k)).sum(axis=1) for k in range(strata_count)], axis=1).astype(float)
    # A case seen on one side only compares nothing within itself: such cases are pooled into one stratum,
    # so a watch whose base and edit saw different cases is judged on their pooled rates, not as z = 0.
    lone = (nb == 0) | (na == 0)
    pooled = [(v * lone).sum(axis=1, keepdims=True) for v in (xb, nb, xa, na)]
    xb, nb, xa, na = (np.concatenate([v * ~lone, extra], axis=1) for v, extra in zip((xb, nb, xa, na), pooled,
                                                                                   strict=True))
    z = cmh_z_counts(xb, nb, xa, na)
    rates = (xb + xa) / np.maximum(nb + na, 1)
    merged = np.where(np.take_along_axis(lone, strata, axis=1), strata_count, strata)
    centre = np.take_along_axis(rates, merged, axis=1)
    return z / np.sqrt(design_effect_rows(y, clusters, both, centre))


def stratified_z(base: ArrayLike, base_clusters: ArrayLike, base_strata: Sequence[object], applied: ArrayLike,
                 applied_clusters: ArrayLike, applied_strata: Sequence[object]) -> float:
    """``stratified_z_rows`` on one comparison; strata are any labels (case ids), one per run."""
    y, g, mask_b = _one_row("base", base, base_clusters, "applied", applied, applied_clusters)
    labels = cluster_ids([*base_strata, *applied_strata])
    if labels.size != y.shape[1]:
        raise BadInputError("strata", labels.size, f"one label per run ({y.shape[1]})")
    return float(stratified_z_rows(y, g, labels[None], mask_b, ~mask_b, int(labels.max(initial=0)) + 1)[0])


def _one_row(name_b: str, base: ArrayLike, base_clusters: ArrayLike, name_a: str, applied: ArrayLike,
             applied_clusters: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.bool_]]:
    yb, gb = _side(name_b, base, base_clusters)
    ya, ga = _side(name_a, applied, applied_clusters)
    y = np.concatenate([yb, ya])[None, :]
    g = np.concatenate([gb, ga + (int(gb.max()) + 1 if gb.size else 0)])[None, :]
    mask_b = np.zeros(y.shape, dtype=bool)
    mask_b[0, : yb.size] = True
    return y, g, mask_b


def cmh_z(base: ArrayLike, applied: ArrayLike, base_strata: ArrayLike, applied_strata: ArrayLike) -> float:
    """The Cochran–Mantel–Haenszel z of base minus applied over strata (case types, time blocks).

    ``z = sum_k (x_bk - n_bk m_k / N_k) / sqrt(sum_k n_bk n_ak m_k (N_k - m_k) / (N_k^2 (N_k - 1)))``, with
    ``m_k`` the passes in stratum k. A stratum seen on one side only carries no comparison and drops out; with
    no informative stratum, z = 0. Comparing within strata removes a shift of the mix between the sides.
    """
    yb, sb = _side("base", base, base_strata)
    ya, sa = _side("applied", applied, applied_strata)
    strata = int(max(sb.max(initial=-1), sa.max(initial=-1))) + 1
    nb = np.bincount(sb, minlength=strata).astype(float)
    na = np.bincount(sa, minlength=strata).astype(float)
    xb = np.bincount(sb, weights=yb, minlength=strata)
    xa = np.bincount(sa, weights=ya, minlength=strata)
    return float(cmh_z_counts(xb[None], nb[None], xa[None], na[None])[0])


def cmh_z_counts(xb: NDArray, nb: NDArray, xa: NDArray, na: NDArray) -> NDArray[np.float64]:
    """``cmh_z`` from passes and runs per stratum, (R, K) arrays, one row per replicate."""
    big = nb + na
    m = xb + xa
    usable = (nb > 0) & (na > 0) & (big > 1)
    safe = np.where(usable, big, 2.0)
    score = np.where(usable, xb - nb * m / safe, 0.0).sum(axis=1)
    var = np.where(usable, nb * na * m * (safe - m) / (safe * safe * (safe - 1.0)), 0.0).sum(axis=1)
    return np.where(var > 0, score / np.sqrt(np.where(var > 0, var, 1.0)), 0.0)


def clustered_interval(outcomes: ArrayLike, clusters: ArrayLike, confidence: float = 0.95) -> ClusteredInterval:
    """A pass rate's interval that holds when runs cluster: Wilson on the effective number of runs.

    The cluster-robust variance gives a design effect ``d`` (its ratio to p(1-p)/n); the interval is the
    Wilson score interval at ``n / d`` runs with Student's t for the normal quantile (Korn and Graubard's
    construction), its degrees of freedom from the spread of the cluster sums (``interval_from_cluster_sums``);
    no lower bound is above an all-passing revision's, and a bound takes all of the 5% where the other bound
    cannot miss (with t at clusters - 1 degrees), else each takes 2.5%. The design effect is never taken below
    1; where it cannot be estimated (every run passed, every run failed, or one cluster) the effective number
    of runs is the number of clusters, as if each cluster were one run. With every run its own cluster it is
    the Wilson interval.
    """
    _checks.probability("confidence", confidence)
    y, g = _side("outcomes", outcomes, clusters)
    if y.size == 0:
        raise BadInputError("outcomes", [], "at least one run")
    low, high, deff, groups = clustered_interval_rows(y[None], g[None], np.ones((1, y.size), bool), confidence)
    return ClusteredInterval(float(y.mean()), float(low[0]), float(high[0]), int(y.size), int(groups[0]),
                             float(deff[0]))


def clustered_interval_rows(
    y: NDArray, clusters: NDArray, mask: NDArray, confidence: float = 0.95, equal_tails: bool = False, *,
    one_sided_degrees: Degrees = "clusters",
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """``clustered_interval`` for every row of (R, L) arrays: (low, high, design effect, clusters);
    ``equal_tails`` and ``one_sided_degrees`` as in ``interval_from_cluster_sums``."""
    y = np.asarray(y, dtype=float)
    offset = (np.arange(y.shape[0]) * y.shape[1])[:, None]
    index = (clusters + offset).ravel()
    passes = np.bincount(index, weights=(y * mask).ravel(), minlength=y.size)
    runs = np.bincount(index, weights=mask.ravel().astype(float), minlength=y.size)
    # Only the labels in use: with sessions of three runs on average two slots in three are empty, and the
    # sums below are the same without them (an empty cluster adds exact zeros).
    used = np.flatnonzero(runs)
    return clustered_interval_counts(passes[used], runs[used], used // y.shape[1], y.shape[0], confidence,
                                     equal_tails, one_sided_degrees=one_sided_degrees)


def clustered_interval_counts(
    passes: ArrayLike, runs: ArrayLike, group: ArrayLike, groups: int, confidence: float = 0.95,
    equal_tails: bool = False, *, one_sided_degrees: Degrees = "clusters",
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """The interval of many groups at once from per-cluster counts: cluster i passed ``passes[i]`` of its
    ``runs[i]`` runs and belongs to group ``group[i]`` in [0, groups) (clusters with no run are ignored).
    Returns (low, high, design effect, clusters) per group; a group with no run gets NaN bounds. This is what
    ``frames.pass_rates`` computes by revision, from the counts it aggregates per session."""
    x = np.asarray(passes, dtype=float)
    m = np.asarray(runs, dtype=float)
    index = np.asarray(group, dtype=np.int64)
    used = m > 0
    n = np.bincount(index, weights=m, minlength=groups)
    total = np.bincount(index, weights=x, minlength=groups)
    p = np.divide(total, n, out=np.full(groups, np.nan), where=n > 0)
    residual = np.where(used, x - m * np.nan_to_num(p)[index], 0.0)
    squares = residual * residual
    s2 = np.bincount(index, weights=squares, minlength=groups)
    s4 = np.bincount(index, weights=squares * squares, minlength=groups)
    g = np.bincount(index, weights=used.astype(float), minlength=groups).astype(np.int64)
    m2 = np.bincount(index, weights=m * m, minlength=groups)
    low, high, deff = interval_from_cluster_sums(n, p, s2, s4, g, m2, confidence, equal_tails,
                                                 one_sided_degrees=one_sided_degrees)
    return low, high, deff, g


def interval_from_cluster_sums(
    n: NDArray, p: NDArray, s2: NDArray, s4: NDArray, g: NDArray, m2: NDArray, confidence: float = 0.95,
    equal_tails: bool = False, *, one_sided_degrees: Degrees = "clusters",
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The interval from a group's runs ``n``, pass rate ``p``, the sums over its ``g`` clusters of the squared
    and fourth-power cluster residual sums (``s2``, ``s4``; residual = passes - runs * p) and of the squared
    cluster sizes (``m2``): (low, high, design effect). Every array is one entry per group.

    Design effect ``d = G_e/(G_e-1) * s2 / (n p (1-p))``, at least 1, with ``G_e = n^2 / m2`` the effective
    number of clusters (Kish's, for clusters of unequal sizes). The factor makes the variance unbiased when
    runs are independent, since then ``E[s2] = n p (1-p) (1 - m2/n^2)``; CR1's ``G/(G-1)`` is that only when
    every cluster has the same size, and with sessions of geometric size it left the interval too narrow
    (0.935-0.939 at 62-75 runs, sticky 0.9, true rate 0.75).

    Degrees of freedom: ``s2`` estimates a variance from G cluster sums, so its relative variance is
    ``(k - 1) / G`` with ``k`` their kurtosis, estimated as ``G s4 / s2^2``; that gives
    ``2 s2^2 / (s4 - s2^2 / G)``, capped at G - 1. When a few clusters hold the failures (sessions that fail
    together, a pass rate near 1) the kurtosis is high and the degrees few, which is what keeps the interval
    honest there: with G - 1 degrees it covered 0.88-0.91 at 60 runs in sticky sessions.

    Tails: no lower bound is above the all-pass revision's (``all_pass_bound``), and a bound takes all of
    ``1 - confidence`` where the other bound cannot miss (below), else half of it. ``equal_tails`` gives half
    to each bound always, without the cap (the interval before; at a true rate of 0.93 and 60-145 runs in
    sessions it covered 0.97-0.98). Coverage on the traffic model: docs/statistics.md, section 8.

    The bound that takes all of it has t at G - 1 degrees, not the kurtosis' (``one_sided_degrees``:
    "clusters", or "kurtosis" for the interval of the round before). Past the edge a bound misses only for a
    revision that saw more failures than the rate gives (the upper bound of a rate near 1), and those failures
    are spread over many sessions, so their variance is measured on many clusters. The kurtosis' degrees,
    about twice the failing clusters, describe the revisions with few failures, which only the other bound
    can miss on. With them the upper bound missed 3.3-4.1% at 0.93 and 60-150 runs, not 5%, and the interval
    covered 0.959-0.967; with G - 1 it misses 4.6-5.3%, and the interval covers 0.945-0.956.
    """
    if one_sided_degrees not in ("clusters", "kurtosis"):
        raise BadInputError("one_sided_degrees", one_sided_degrees, '"clusters" or "kurtosis"')
    n = np.asarray(n, dtype=float)
    p = np.asarray(p, dtype=float)
    s2 = np.asarray(s2, dtype=float)
    s4 = np.asarray(s4, dtype=float)
    g = np.asarray(g, dtype=float)
    m2 = np.asarray(m2, dtype=float)
    valid = n > 0
    n_safe = np.where(valid, n, 1.0)
    p_safe = np.where(valid, p, 0.5)
    iid = p_safe * (1.0 - p_safe)
    # No variance to measure a design effect from (all pass, all fail, one cluster): count clusters, not runs.
    estimable = (iid > 0) & (g > 1)
    # Every cluster one run (no session, no case): nothing clusters, and the interval is Wilson's.
    single = g >= n_safe
    # Kish's effective number of clusters: G when they are of one size, fewer when a few big ones dominate.
    effective_clusters = np.where(m2 > 0, n_safe * n_safe / np.where(m2 > 0, m2, 1.0), 1.0)
    factor = np.where(effective_clusters > 1, effective_clusters / np.maximum(effective_clusters - 1.0, 1e-12),
                      1.0)
    deff = np.where(estimable, np.maximum(factor * s2 / (n_safe * np.where(iid > 0, iid, 1.0)), 1.0),
                    n_safe / np.maximum(g, 1.0))
    deff = np.where(single, 1.0, deff)
    effective = n_safe / deff
    spread = s4 - s2 * s2 / np.maximum(g, 1.0)
    kurtosis_dof = np.where(spread > 0, 2.0 * s2 * s2 / np.where(spread > 0, spread, 1.0), np.inf)
    dof = np.where(estimable, np.minimum(kurtosis_dof, g - 1.0), g - 1.0)
    dof = np.where(single, np.inf, np.maximum(dof, 1.0))
    alpha = 1.0 - confidence
    # Student's t quantile (scipy.stats costs a second to import).
    low, high = _wilson_bounds(p_safe, iid, effective, stdtrit(dof, 1.0 - alpha / 2.0))
    # A few failures must not make the interval surer than none: no lower bound is above the one of a revision
    # whose every run passed (Wilson's at 1 on its clusters), no upper bound below the one where every run
    # failed. Equal tails left 2 failures in 40 sessions above it (0.932 against 0.907 at 140 runs).
    # Then a bound takes all of alpha where the other bound cannot miss. As a test inverted: a rate u above
    # that edge is never rejected from the passing side, so the test at u may spend all of alpha on the
    # failing side (the reasoning of Blaker's exact tests, on this interval). The upper bound is the one-sided
    # one if that reaches the edge, else the two-sided one but never past it; the lower bound is the mirror
    # image. Near a rate of 1 with few failures this is what keeps the interval from covering 0.98, not 0.95.
    # The one-sided bound has t at G - 1 degrees: past the edge only revisions with many failures, and so a
    # variance measured on many clusters, reach it (docstring).
    if not equal_tails:
        whole = np.maximum(g - 1.0, 1.0) if one_sided_degrees == "clusters" else dof
        low_one, high_one = _wilson_bounds(p_safe, iid, effective, stdtrit(whole, 1.0 - alpha))  # all of alpha
        edge = all_pass_bound(g, confidence)
        # Below one half (fewer than 7 clusters) the two regions would overlap: equal tails, no cap.
        clustered = ~single & (g > 1) & (edge > 0.5)
        low = np.where(clustered, np.minimum(low, edge), low)
        high = np.where(clustered, np.maximum(high, 1.0 - edge), high)
        high = np.where(clustered, np.where(high_one >= edge, high_one, np.minimum(high, edge)), high)
        low = np.where(clustered, np.where(low_one <= 1.0 - edge, low_one, np.maximum(low, 1.0 - edge)), low)
    low = np.where(p_safe <= 0, 0.0, low)
    high = np.where(p_safe >= 1, 1.0, high)
    return (np.where(valid, low, np.nan), np.where(valid, high, np.nan), np.where(valid, deff, np.nan))


def all_pass_bound(g: NDArray, confidence: float = 0.95) -> NDArray[np.float64]:
    """The lower bound of a revision of ``g`` clusters whose every run passed: Wilson's at p = 1 on G runs with
    t at G - 1 degrees, ``G / (G + t^2)``. ``interval_from_cluster_sums`` caps every lower bound of a revision
    of G clusters at it (from 7 clusters on), and every upper bound at one minus it from below."""
    g = np.asarray(g, dtype=float)
    q = stdtrit(np.maximum(g - 1.0, 1.0), 0.5 + confidence / 2.0)
    return g / (g + q * q)


def _wilson_bounds(p: NDArray, iid: NDArray, effective: NDArray, q: NDArray) -> tuple[NDArray, NDArray]:
    """Wilson's score bounds at ``effective`` runs (need not be whole) with quantile ``q``, clipped to [0, 1]."""
    q2 = q * q
    denom = 1.0 + q2 / effective
    centre = (p + q2 / (2.0 * effective)) / denom
    half = q / denom * np.sqrt(iid / effective + q2 / (4.0 * effective * effective))
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def _side(name: str, outcomes: ArrayLike, labels: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    y = np.asarray(outcomes)
    if y.ndim != 1 or (y.size and y.dtype not in (np.bool_,) and not np.isin(y, (0, 1)).all()):
        raise BadInputError(name, f"array of {y.dtype}", "a 1-D sequence of pass (1/True) and fail (0/False)")
    raw = list(labels) if not isinstance(labels, np.ndarray) else labels.tolist()
    if len(raw) != y.size:
        raise BadInputError(f"{name} clusters", len(raw), f"one label per run ({y.size})")
    return y.astype(float), cluster_ids(raw)
