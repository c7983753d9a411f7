"""The default regression detector, a Bernoulli CUSUM per agent and revision: its vectorised form agrees with the
detector's own per-run update; with no change, in its default configuration, it triggers falsely at most the
weekly budget (0.05 per agent, the reference's estimation error included, iid and in sessions) at 300 and 3,000
runs a day, and at most a k-th of it with k agents registered; a real 0.9 -> 0.8 drop is caught within 300 runs
at least 80% of the time; its default reference is at least 1,000 runs and a day, and before it is complete it
does not fire.

Each replicate draws its reference at the size the default detector completes it at the given traffic
(``default_reference``, through the detector's own rule) and gets the threshold the detector computes from it
(``detector.calibrated``), so a changed default changes what is tested. The replicate counts: 20,000 where the
simulation is cheap, 2,000 where one replicate is a 21,000-run week at p = 0.5 or a stream in sessions; each
assertion allows 3 standard errors of its count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lousho.kernel import cusum
from lousho.observe.trigger.detector import CusumConfig, Detector, Run, calibrated, reference_complete

DEFAULT = CusumConfig()
BUDGET = DEFAULT.weekly_budget
REFERENCE = DEFAULT.reference_runs
HOUR_US = 3600 * 10**6


def default_reference(per_day: float, config: CusumConfig = DEFAULT) -> tuple[int, float]:
    """The reference ``config``'s detector completes on runs evenly spaced at ``per_day`` a day: (its runs,
    the seconds from its first run to its last). At 3,000 a day the default's day outweighs its 1,000 runs."""
    gap_us = round(86_400e6 / per_day)  # in microseconds, as runs' ends are
    runs = 1
    while not reference_complete(config, runs, (runs - 1) * gap_us / 1e6):
        runs += 1
    return runs, (runs - 1) * gap_us / 1e6


def thresholds(passes: np.ndarray, reference: int, span_s: float, config: CusumConfig = DEFAULT,
               designs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, cusum.Calibration]:
    """What the detector computes when its reference completes (``calibrated``), per replicate: (h, on pass,
    on fail), and the last replicate's calibration (the week and budget are the same for all)."""
    h, on_pass, on_fail = (np.empty(len(passes)) for _ in range(3))
    designs = np.ones(len(passes)) if designs is None else designs
    for i, (k, d) in enumerate(zip(passes.tolist(), designs.tolist(), strict=True)):
        calibration, p0 = calibrated(config, reference, k, span_s, d)
        h[i] = calibration.h
        on_pass[i], on_fail[i] = cusum.steps(p0, config.drop)
    return h, on_pass, on_fail, calibration


def week_maxima(rng: np.random.Generator, p: float, week: int, on_pass: np.ndarray,
                on_fail: np.ndarray) -> np.ndarray:
    """The largest statistic over a week of iid runs at ``p``, per replicate, 1,000 replicates at a time."""
    return np.concatenate([cusum.iid_maxima(rng, p, week, on_pass[i:i + 1000], on_fail[i:i + 1000])
                           for i in range(0, len(on_pass), 1000)])


def bound(rate: float, n: int) -> float:
    return rate + 3 * math.sqrt(rate * (1 - rate) / n)


def test_the_vectorised_cusum_agrees_with_the_detectors_per_run_update():
    rng = np.random.default_rng(11)
    for p, p0 in ((0.9, 0.9), (0.85, 0.9), (0.5, 0.55), (0.95, 0.97)):
        outcomes = rng.random((40, 3000)) < p
        step = cusum.steps(p0)
        on_pass, on_fail = np.full(40, step[0]), np.full(40, step[1])
        vectorised = cusum.paths(outcomes, on_pass, on_fail)
        at = [np.flatnonzero(~row) + 1 for row in outcomes]
        width = max(len(a) for a in at)
        padded = np.array([np.concatenate([a, np.full(width - len(a), 10**9)]) for a in at])
        by_failures = cusum.failure_maxima(padded, 3000, on_pass, on_fail)
        for row, path, top in zip(outcomes, vectorised, by_failures, strict=True):
            s, per_run = 0.0, []
            for passed in row.tolist():
                s = cusum.update(s, passed, step)
                per_run.append(s)
            assert np.allclose(path, per_run, atol=1e-9)
            assert top == pytest.approx(max(per_run), abs=1e-9)
    # The detector itself, fed runs one by one after its reference: the same alarm run as the vectorised form.
    config = CusumConfig(reference_hours=0.0, runs_per_day=300)
    for seed in range(6):
        rng = np.random.default_rng(seed)
        stream = np.concatenate([rng.random(REFERENCE) < 0.9, rng.random(600) < 0.75])
        detector = Detector("rev", config)
        detector.feed([Run(f"r{i:05d}", i, bool(o)) for i, o in enumerate(stream.tolist())])
        reading = detector.reading()
        assert reading.threshold is not None and reading.runs_watched == 600
        step = cusum.steps(reading.p0)
        alarm = cusum.first_alarms(stream[None, REFERENCE:], np.array([step[0]]), np.array([step[1]]),
                                   reading.threshold)[0]
        assert (reading.alarm_run or 0) == alarm
        # And the simulations' thresholds are the detector's own.
        h, *_ = thresholds(np.array([int(stream[:REFERENCE].sum())]), REFERENCE, REFERENCE - 1.0, config)
        assert h[0] == reading.threshold


def test_before_its_reference_is_complete_the_detector_says_so_and_does_not_fire():
    detector = Detector("rev", CusumConfig(reference_hours=0.0, runs_per_day=300))
    detector.feed([Run(f"r{i}", i, True) for i in range(500)] + [Run(f"f{i}", 500 + i, False) for i in range(499)])
    reading = detector.reading()
    assert reading.threshold is None and not reading.regressed and reading.statistic == 0.0
    assert reading.describe() == "reference incomplete: 999 of at least 1000 runs (the detector does not fire before)"
    # Unscored runs and runs without a verdict are failures: a reference of them has a low pass rate.
    detector.feed([Run("u", 2000, None)])
    assert detector.reading().p0 == pytest.approx(cusum.reference_rate(500, 1000))


def test_a_reference_must_also_span_its_hours():
    detector = Detector("rev", CusumConfig(reference_hours=24.0, runs_per_day=None))
    detector.feed([Run(f"r{i:04d}", i * HOUR_US // 100, True) for i in range(2000)])  # 100 runs an hour, 20 hours
    assert detector.reading().threshold is None
    detector.feed([Run(f"s{i:04d}", 20 * HOUR_US + i * HOUR_US // 100, i % 10 != 0) for i in range(500)])
    reading = detector.reading()
    assert reading.threshold is not None and reading.reference_runs == 2401  # the run that completed 24 hours
    assert reading.calibration is not None and reading.calibration.week_runs == pytest.approx(7 * 2400, rel=0.01)


def test_the_default_reference_is_at_least_1000_runs_and_24_hours():
    """The defaults themselves, through the detector: 1,000 runs in 2 hours are not a reference until the
    revision's runs span a day, and 999 runs over two days are not one until the 1,000th."""
    fast = Detector("rev", CusumConfig())
    fast.feed([Run(f"a{i:04d}", i * 2 * HOUR_US // 1000, i % 10 != 0) for i in range(1000)])
    later = [Run(f"b{i:04d}", 2 * HOUR_US + (i + 1) * HOUR_US // 10, True) for i in range(220)]  # 10 an hour
    fast.feed(later[:-1])  # the last of these ends just before 24 hours from the first run
    assert fast.reading().threshold is None and fast.reading().reference_needed == 1000
    fast.feed(later[-1:])
    reading = fast.reading()
    assert reading.threshold is not None and reading.reference_runs == 1220
    slow = Detector("rev", CusumConfig())
    slow.feed([Run(f"c{i:03d}", i * 48 * HOUR_US // 998, i % 10 != 0) for i in range(999)])
    assert slow.reading().threshold is None
    slow.feed([Run("c999", 49 * HOUR_US, True)])
    assert slow.reading().threshold is not None and slow.reading().reference_runs == 1000
    assert default_reference(300) == (1000, 999 * 288.0) and default_reference(3000)[0] == 3001


def test_a_new_revision_is_judged_against_the_reference_of_the_one_before_it():
    """A changed prompt that hurts is a drop from the old revision's pass rate, seen from its first runs;
    one that does not hurt is not; before the old reference is complete the new revision builds its own."""
    config = CusumConfig(reference_hours=0.0, runs_per_day=300)
    old = Detector("auto:a", config)
    old.feed([Run(f"a{i:04d}", i, i % 10 != 0) for i in range(1000)])  # p = 0.9
    assert old.reading().threshold is not None
    worse = old.carried_to("auto:b")
    assert (worse.revision, worse.reading().p0, worse.reading().statistic) == ("auto:b", old.reading().p0, 0.0)
    worse.feed([Run(f"b{i:03d}", 2000 + i, i % 2 == 0) for i in range(200)])  # p = 0.5
    assert worse.reading().regressed
    same = old.carried_to("auto:c")
    same.feed([Run(f"c{i:03d}", 2000 + i, i % 10 != 0) for i in range(200)])
    assert not same.reading().regressed
    fresh = Detector("auto:a", config).carried_to("auto:d")  # the one before had no reference yet
    assert fresh.reading().threshold is None


@pytest.mark.parametrize(("p", "per_day", "replicates"), [
    (0.5, 300, 20_000), (0.9, 300, 20_000), (0.95, 300, 20_000),
    (0.5, 3000, 2_000), (0.9, 3000, 20_000), (0.95, 3000, 20_000),
])
def test_no_change_triggers_falsely_within_the_weekly_budget(p, per_day, replicates):
    """iid runs at p, the default detector: each replicate draws its reference (1,000 runs at 300 a day, a day's
    3,001 at 3,000), gets its own calibrated threshold, then watches a week of the same traffic."""
    rng = np.random.default_rng(int(p * 100) + per_day)
    reference, span_s = default_reference(per_day)
    h, on_pass, on_fail, calibration = thresholds(rng.binomial(reference, p, replicates), reference, span_s)
    assert calibration.alpha == BUDGET and calibration.week_runs == pytest.approx(7 * per_day, rel=0.01)
    false = float(np.mean(week_maxima(rng, p, calibration.week_runs, on_pass, on_fail) >= h))
    assert false <= bound(BUDGET, replicates), (false, np.median(h))


@pytest.mark.parametrize("per_day", [300, 3000])
def test_with_three_agents_registered_each_triggers_falsely_within_a_third_of_the_budget(per_day):
    """The weekly budget is over all registered agents: each agent's detector is calibrated to 0.05 / 3, and its
    simulated false triggers stay within that (p = 0.9, 20,000 replicates)."""
    config = CusumConfig(agents=3)
    rng = np.random.default_rng(3 + per_day)
    reference, span_s = default_reference(per_day, config)
    replicates = 20_000
    h, on_pass, on_fail, calibration = thresholds(rng.binomial(reference, 0.9, replicates), reference, span_s,
                                                  config)
    assert calibration.alpha == pytest.approx(BUDGET / 3) and calibration.budget_met
    false = float(np.mean(week_maxima(rng, 0.9, calibration.week_runs, on_pass, on_fail) >= h))
    assert false <= bound(BUDGET / 3, replicates), (false, np.median(h))


@pytest.mark.parametrize(("p", "per_day", "sticky"), [(0.9, 300, 0.5), (0.9, 3000, 0.5), (0.95, 300, 0.5)])
def test_no_change_in_sessions_triggers_falsely_within_the_weekly_budget(p, per_day, sticky):
    """Runs in sessions (geometric, mean 3, a repeat copies the session's first outcome with probability
    ``sticky``), the default detector: the reference's design effect raises the threshold. 2,000 streams of
    a week each; p = 0.95 is the rate nearest its budget, p = 0.5 (far below it) too slow to simulate here."""
    rng = np.random.default_rng(per_day + int(sticky * 10) + int(p * 100))
    streams = 2000
    size, span_s = default_reference(per_day)
    reference, sessions = cusum.session_streams(rng, streams, size, p, sticky)
    designs = np.array([cusum.design_effect(_sessions(r, s), size, int(r.sum()))
                        for r, s in zip(reference, sessions, strict=True)])
    h, on_pass, on_fail, calibration = thresholds(reference.sum(axis=1), size, span_s, designs=designs)
    week = calibration.week_runs
    maxima = np.concatenate([cusum.paths(cusum.session_streams(rng, 250, week, p, sticky)[0],
                                         on_pass[i:i + 250], on_fail[i:i + 250]).max(axis=1)
                             for i in range(0, streams, 250)])
    false = float(np.mean(maxima >= h))
    assert false <= bound(BUDGET, streams), (false, np.median(designs))


def _sessions(outcomes: np.ndarray, session: np.ndarray) -> list[tuple[int, int]]:
    _, index = np.unique(session, return_inverse=True)
    return list(zip(np.bincount(index).tolist(), np.bincount(index, weights=outcomes).astype(int).tolist(),
                    strict=True))


@pytest.mark.parametrize("per_day", [300, 3000])
def test_a_drop_from_0_9_to_0_8_is_caught_within_300_runs(per_day):
    """The default detector's reference (1,000 runs at 300 a day, a day's 3,001 at 3,000), then the drop from
    the first watched run: 20,000 replicates."""
    rng = np.random.default_rng(per_day)
    (reference, span_s), replicates = default_reference(per_day), 20_000
    h, on_pass, on_fail, _ = thresholds(rng.binomial(reference, 0.9, replicates), reference, span_s)
    caught = cusum.first_alarms(rng.random((replicates, 300)) < 0.8, on_pass, on_fail, h) > 0
    assert caught.mean() >= 0.8, (caught.mean(), np.median(h))
