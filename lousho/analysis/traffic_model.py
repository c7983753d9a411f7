"""The traffic model the monitor's error rates are stated under, and the monitor's decision over many streams.

Real traffic is not independent, identically distributed runs, so the monitor's rates are measured on
streams that are not: two kinds of case (easy, p = 0.97; hard, p = 0.55; 30% hard gives 0.844), a mix that
steps at the apply or cycles over the day, outages (10 consecutive runs fail with a verdict, each carrying the
mark a live run of an outage carries: a model call failed with a provider error), sessions of geometric size
(mean 3) sharing one case, a repeat copying the session's first outcome with probability ``sticky``, and edits
that crash runs (no verdict, no provider error: counted as a failure). ``SCENARIOS`` is the suite;
``rollback_rate`` runs a design's decision on every stream at once (numpy, one replicate per row), with the
same statistics the monitor calls (``clustered``), and a test checks it against ``monitor.decide`` stream by
stream.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from lousho.analysis.clustered import clustered_z_rows, stratified_z_rows
from lousho.analysis.stats import pooled_z_arrays
from lousho.kernel.outage_rule import in_outage

P_EASY, P_HARD = 0.97, 0.55
SESSION_MEAN = 3.0
OUTAGE_RUNS = 10
CONCURRENT_LENGTH = 600  # runs per stream after the apply: a 20% holdback reaches 60 runs well before
BEFORE = 200  # runs of the base revision before the apply (before/after designs)


@dataclass(frozen=True)
class Scenario:
    """One kind of traffic. ``hard_before``/``hard_after``: the share of hard cases before and after the apply;
    ``daily``: the mix's swing (± points of the hard share) over a day at ``per_hour`` runs an hour;
    ``outage_every``: runs per outage (0: none), each ``outage_runs`` long; ``sticky``: None for independent
    runs, else sessions of mean 3 with that stickiness; ``crash_hard``: the share of the edit's hard-case runs that
    crash; ``p_base`` / ``p_applied``: a single pass rate for every case instead of the easy/hard mix (the power
    scenario)."""

    name: str
    hard_before: float = 0.3
    hard_after: float = 0.3
    daily: float = 0.0
    per_hour: float = 5.0
    outage_every: int = 0
    outage_runs: int = OUTAGE_RUNS
    sticky: float | None = None
    crash_hard: float = 0.0
    p_base: float | None = None
    p_applied: float | None = None

    @property
    def real_change(self) -> bool:
        return self.crash_hard > 0 or self.p_applied != self.p_base


# The audit's suite: no real change in each but the last two.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("independent runs, stable mix"),
    Scenario("mix 30 -> 35% hard at the apply", hard_after=0.35),
    Scenario("mix 30 -> 40% hard at the apply", hard_after=0.40),
    Scenario("mix 30 -> 50% hard at the apply", hard_after=0.50),
    Scenario("daily cycle ±10 points, 5 runs/h", daily=0.1, per_hour=5),
    Scenario("daily cycle ±10 points, 50 runs/h", daily=0.1, per_hour=50),
    Scenario("an outage per 1,000 runs", outage_every=1000),
    Scenario("an outage per 200 runs", outage_every=200),
    Scenario("sessions, sticky 0", sticky=0.0),
    Scenario("sessions, sticky 0.5", sticky=0.5),
    Scenario("sessions, sticky 0.9", sticky=0.9),
    Scenario("ordinary day: 30 -> 35% hard, outage per 1,000, sticky 0.5", hard_after=0.35, outage_every=1000,
             sticky=0.5),
    Scenario("the edit crashes 50% of hard cases (0.844 -> 0.761)", crash_hard=0.5),
    Scenario("a real drop 0.9 -> 0.8, independent runs", p_base=0.9, p_applied=0.8),
)


@dataclass(frozen=True)
class Streams:
    """Replicate streams, one per row, in time order: ``y`` 1 pass / 0 fail (a crash is a fail), ``crashed``
    no verdict, ``session`` labels per row, ``hard`` the case type, ``applied`` the edit served the run,
    ``provider_error`` a model call of the run failed with a provider error: what a run made during an outage
    shows in its spans, and all the monitor can know of the outage (the model keeps no other flag of it)."""

    y: NDArray[np.float64]
    crashed: NDArray[np.bool_]
    session: NDArray[np.int64]
    hard: NDArray[np.bool_]
    applied: NDArray[np.bool_]
    provider_error: NDArray[np.bool_]
    apply_at: int  # index of the first run after the apply (0: every run is after it)


def streams(scenario: Scenario, reps: int, *, concurrent: bool, holdback: float = 0.2,
            seed: int | None = 0, before: int | None = None, after: int | None = None) -> Streams:
    """``reps`` streams of ``scenario``. ``concurrent``: every run is after the apply (``CONCURRENT_LENGTH`` of
    them) and a ``holdback`` share of *sessions* keeps the base revision; otherwise ``before`` base runs
    (``BEFORE``) precede the apply and ``after`` runs (80) after it are the edit's."""
    rng = np.random.default_rng(seed)
    before = 0 if concurrent else (BEFORE if before is None else before)
    length = CONCURRENT_LENGTH if concurrent else before + (80 if after is None else after)
    index = np.arange(length)
    if scenario.sticky is None:
        start = np.ones((reps, length), dtype=bool)
    else:
        start = rng.random((reps, length), dtype=np.float32) < 1.0 / SESSION_MEAN
        start[:, 0] = True
    first = np.maximum.accumulate(np.where(start, index, 0), axis=1)
    session = np.cumsum(start, axis=1) - 1

    def per_session(values: NDArray) -> NDArray:
        return np.take_along_axis(values, first, axis=1)

    share = np.where(index < before, scenario.hard_before, scenario.hard_after)[None, :]
    if scenario.daily:
        phase = rng.random((reps, 1)) * 2 * np.pi
        share = share + scenario.daily * np.sin(phase + 2 * np.pi * index[None, :] / (24 * scenario.per_hour))
    hard = per_session(rng.random((reps, length), dtype=np.float32) < share)
    if concurrent:
        applied = per_session(rng.random((reps, length), dtype=np.float32) >= holdback)
    else:
        applied = np.broadcast_to(index >= before, (reps, length)).copy()
    if scenario.p_base is not None:
        rate = np.where(applied, scenario.p_applied if scenario.p_applied is not None else scenario.p_base,
                        scenario.p_base)
    else:
        rate = np.where(hard, P_HARD, P_EASY)
    fresh = rng.random((reps, length), dtype=np.float32) < rate
    if scenario.sticky:
        copy = (rng.random((reps, length), dtype=np.float32) < scenario.sticky) & ~start
        fresh = np.where(copy, per_session(fresh), fresh)
    outage = np.zeros((reps, length), dtype=bool)
    if scenario.outage_every:
        starts = np.cumsum(rng.random((reps, length), dtype=np.float32) < 1.0 / scenario.outage_every, axis=1)
        span = scenario.outage_runs
        lagged = np.concatenate([np.zeros((reps, span), dtype=starts.dtype), starts[:, :-span]], axis=1)
        outage = starts - lagged > 0
    crashed = applied & hard & (rng.random((reps, length), dtype=np.float32) < scenario.crash_hard) & ~outage
    y = (fresh & ~outage & ~crashed).astype(float)
    # Every run of an outage ends with a verdict (a failing apology) and shows the provider's error on its
    # model call; nothing else does (a crash is the agent's own error).
    return Streams(y, crashed, session, hard, applied, outage, before)


@dataclass(frozen=True)
class Decisions:
    """Each stream's decision: ``rolled`` back, and the ``runs`` the traffic served from the apply until the
    decision (the look that rolled back, else the last look; the whole stream when the last look was never
    reached), ``edit_runs`` of them served by the edit."""

    rolled: NDArray[np.bool_]
    runs: NDArray[np.int64]
    edit_runs: NDArray[np.int64]


def rollback_rows(s: Streams, design: str, looks: tuple[int, ...], bounds: tuple[float, ...],
                  min_drop: float = 0.0) -> NDArray[np.bool_]:
    """Whether each stream's edit is rolled back by ``design`` (``concurrent``, ``stratified`` or ``seed``)
    at ``looks`` with z ``bounds``: ``monitor.decide``'s rule, over rows."""
    return decisions(s, design, looks, bounds, min_drop).rolled


def decisions(s: Streams, design: str, looks: tuple[int, ...], bounds: tuple[float, ...],
              min_drop: float = 0.0) -> Decisions:
    """``rollback_rows`` with the runs each stream spent until its decision."""
    if design == "concurrent":
        rolled, moment = _concurrent_rows(s, looks, bounds, min_drop)
    else:
        rolled, moment = _before_after_rows(s, design, looks, bounds, min_drop)
    rows = np.arange(s.y.shape[0])
    edit_runs = np.cumsum(s.applied, axis=1)[rows, moment]
    return Decisions(rolled, moment + 1 - s.apply_at, edit_runs.astype(np.int64))


def _trimmed(s: Streams, *masks: NDArray[np.bool_]) -> tuple[slice, NDArray[np.int64]]:
    """The columns a look reads (from the first to the last run any mask holds) and the session labels there,
    from 0: the statistics' work is over every column they are given, most of them outside the look."""
    used = np.flatnonzero(np.logical_or.reduce([m.any(axis=0) for m in masks]))
    if used.size == 0:
        return slice(0, 1), s.session[:, :1] - s.session[:, :1]
    cols = slice(int(used[0]), int(used[-1]) + 1)
    # Sessions are runs in a row, labelled in order: within the columns the labels run from the first's.
    return cols, s.session[:, cols] - s.session[:, cols.start, None]


def _concurrent_rows(s: Streams, looks: tuple[int, ...], bounds: tuple[float, ...],
                     min_drop: float) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    base, applied = ~s.applied, s.applied
    cb, ca = np.cumsum(base, axis=1), np.cumsum(applied, axis=1)
    rows = np.arange(s.y.shape[0])
    rolled = np.zeros(s.y.shape[0], dtype=bool)
    decided = np.zeros(s.y.shape[0], dtype=bool)
    moment = np.full(s.y.shape[0], s.y.shape[1] - 1)
    for k, (n, bound) in enumerate(zip(looks, bounds, strict=True)):
        reached = cb[:, -1] >= n
        at = np.argmax(cb >= n, axis=1)  # the base side's n-th run: the look's moment
        m = np.maximum(ca[rows, at], n)
        reached &= ca[:, -1] >= m
        mb, ma = base & (cb <= n), applied & (ca <= m[:, None])
        # The look is judged when both arms have its runs: the later of the base's n-th and the edit's m-th.
        when = np.maximum(at, np.argmax(ca >= m[:, None], axis=1))
        z, drop = _concurrent_look(s, mb, ma, when, n, m)
        hit = reached & (z >= bound - 1e-9) & (drop > min_drop + 1e-9)
        final = ~decided & (hit | (reached & (k == len(looks) - 1)))
        moment = np.where(final, when, moment)
        rolled |= ~decided & hit
        decided |= final
    return rolled, moment


def _concurrent_look(s: Streams, mb: NDArray[np.bool_], ma: NDArray[np.bool_], when: NDArray[np.int64], n: int,
                     m: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(z, drop) of one look on every row. A look reads each row's runs up to its moment only, and the moments
    spread from about a hundred runs to the stream's end, so rows are taken in chunks of similar moments, each
    over its own columns: the statistic's work is over every column it is given."""
    z, drop = np.zeros(len(when)), np.zeros(len(when))
    order = np.argsort(when, kind="stable")
    for rows in np.array_split(order, 8):
        if rows.size == 0:
            continue
        width = int(when[rows].max()) + 1  # a session's label is at most its first run's column: below width
        y, b, a = s.y[rows, :width], mb[rows, :width], ma[rows, :width]
        z[rows] = clustered_z_rows(y, s.session[rows, :width], b, a)
        drop[rows] = (y * b).sum(axis=1) / n - (y * a).sum(axis=1) / m[rows]
    return z, drop


def _before_after_rows(s: Streams, design: str, looks: tuple[int, ...], bounds: tuple[float, ...],
                       min_drop: float) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    seed = design == "seed"
    # The seed rule reads scored runs only (a crash is invisible to it) and knows nothing of outages; the
    # stratified design counts a crash as a failure and leaves out, either side of the apply, the runs in the
    # outage windows it detects from the runs' provider errors, as the live monitor does (kernel.outage_rule.in_outage).
    kept = ~s.crashed if seed else ~in_outage(s.provider_error)
    base = ~s.applied & kept
    applied = s.applied & kept
    last = looks[-1]
    from_end = np.cumsum(base[:, ::-1], axis=1)[:, ::-1]  # base runs from here to the apply
    base_window = base & (from_end <= last)
    cb = np.cumsum(base_window, axis=1)
    ca = np.cumsum(applied, axis=1)
    rolled = np.zeros(s.y.shape[0], dtype=bool)
    decided = np.zeros(s.y.shape[0], dtype=bool)
    moment = np.full(s.y.shape[0], s.y.shape[1] - 1)
    for k, (n, bound) in enumerate(zip(looks, bounds, strict=True)):
        reached = (cb[:, -1] >= n) & (ca[:, -1] >= n)
        mb = base_window & (cb <= n)
        ma = applied & (ca <= n)
        xb, xa = (s.y * mb).sum(axis=1), (s.y * ma).sum(axis=1)
        if seed:
            z = pooled_z_arrays(xb, n, xa, n)
            hit = reached & (z >= bound - 1e-9) & (xb - xa > min_drop * n + 1e-9)
        else:
            cols, session = _trimmed(s, mb, ma)
            z = stratified_z_rows(s.y[:, cols], session, s.hard[:, cols].astype(np.int64), mb[:, cols],
                                  ma[:, cols], 2)
            hit = reached & (z >= bound - 1e-9) & ((xb - xa) / n > min_drop + 1e-9)
        final = ~decided & (hit | (reached & (k == len(looks) - 1)))
        moment = np.where(final, np.argmax(ca >= n, axis=1), moment)  # the edit's n-th run after the apply
        rolled |= ~decided & hit
        decided |= final
    return rolled, moment


def rollback_rate(scenario: Scenario, design: str, looks: tuple[int, ...], bounds: tuple[float, ...], *,
                  reps: int = 20_000, holdback: float = 0.2, min_drop: float = 0.0, seed: int = 0) -> float:
    """P(roll back) of ``design`` on ``scenario``, estimated on ``reps`` streams (a fixed ``seed``)."""
    s = streams(scenario, reps, concurrent=design == "concurrent", holdback=holdback, seed=seed)
    return float(rollback_rows(s, design, looks, bounds, min_drop).mean())


@lru_cache(maxsize=256)
def stated_rates(design: str, looks: tuple[int, ...], bounds: tuple[float, ...], p0: float, drop: float,
                 holdback: float, min_drop: float = 0.0, reps: int = 4_000) -> tuple[float, float]:
    """(P(false rollback), power) that a decision records for a design other than the seed's, at base rate
    ``p0`` and a ``drop``: simulated on independent runs (a fixed seed, ``reps`` streams). The exact DP
    covers only the pooled z; the scenario table gives the rates under drift, outages and sessions."""
    null = Scenario("stated", p_base=p0, p_applied=p0)
    alternative = replace(null, p_applied=max(p0 - drop, 0.0))
    return (rollback_rate(null, design, looks, bounds, reps=reps, holdback=holdback, min_drop=min_drop, seed=1),
            rollback_rate(alternative, design, looks, bounds, reps=reps, holdback=holdback, min_drop=min_drop,
                          seed=2))
