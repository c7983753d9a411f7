"""The monitor's path (page and plot draw it) is the statistic of the design that decides: at every look its
point is exactly ``decide``'s evidence there, and its conclusion is ``decide``'s action."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from lousho.analysis import traffic_model
from lousho.analysis.monitor import DESIGNS, Arm, MonitorConfig, decide, statistic_path
from lousho.analysis.monitor_path import MonitorPath
from lousho.analysis.stats import pooled_z
from lousho.kernel.monitor_rule import LOOKS

CASES = ("add", "sub", "mul", "div")
# Never crosses (no z on 60 runs a side comes near): ``decide`` then reports the z of the last look it reached.
NEVER = 99.0


@pytest.fixture(autouse=True)
def _no_stated_rate_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    # The rates a decision states are simulated per config (seconds each); they are not what this file tests.
    monkeypatch.setattr(traffic_model, "stated_rates", lambda *args, **kwargs: (0.0, 0.0))


def _runs(rng: random.Random, count: int, rate: float, crash: float, start: int, step: int, tag: str
          ) -> list[tuple[bool | None, str, str, int]]:
    """``count`` runs in sessions of 1-4 runs that share a case and lean the same way, some crashed (None)."""
    runs: list[tuple[bool | None, str, str, int]] = []
    t = start
    while len(runs) < count:
        session, case = f"{tag}-{rng.randrange(10**9)}", rng.choice(CASES)
        lean = min(max(rate + rng.choice((-0.2, 0.0, 0.2)), 0.0), 1.0)
        for _ in range(rng.randint(1, 4)):
            t += rng.randint(1, step)
            passed = None if rng.random() < crash else rng.random() < lean
            runs.append((passed, session, case, t))
    return runs[:count]


def _arm(runs: list[tuple[bool | None, str, str, int]]) -> Arm:
    return Arm(*(tuple(column) for column in zip(*runs, strict=True))) if runs else Arm(())


def _watch(rng: random.Random, design: str) -> tuple[Arm, Arm]:
    """A base and an applied arm as ``Monitor.arms`` gives them for ``design``: concurrent, the held-back sessions
    interleaved in time with the edit's (about a fifth of the runs); otherwise the base's runs before the apply
    (up to past the last look, so ``decide``'s trimming to the runs nearest the apply shows) and the edit's after."""
    p_base, p_applied = rng.choice([0.9, 0.8, 0.6]), rng.choice([0.95, 0.8, 0.6, 0.3])
    crash = rng.choice([0.0, 0.05, 0.2])
    if design == "concurrent":
        base = _runs(rng, rng.randrange(0, 75), p_base, crash / 4, 0, 50, "b")
        applied = _runs(rng, rng.randrange(0, 320), p_applied, crash, 0, 12, "a")
    else:
        base = _runs(rng, rng.randrange(0, 90), p_base, crash / 4, 0, 10, "b")
        applied = _runs(rng, rng.randrange(0, 75), p_applied, crash, 10**6, 10, "a")
    return _arm(base), _arm(applied)


def _upto(arm: Arm, runs: int, design: str) -> Arm:
    """The arm's first ``runs`` runs as ``design`` counts them (the seed design skips a run without a verdict)."""
    counted = [i for i, p in enumerate(arm.passed) if design != "seed" or p is not None]
    end = counted[runs - 1] + 1 if runs else 0
    return Arm(*(values[:end] for values in (arm.passed, arm.sessions, arm.cases, arm.started_ns)))


def _at_look(design: str, base: Arm, applied: Arm, n: int) -> tuple[Arm, Arm]:
    """The arms cut so that the look at ``n`` is the last one ``decide`` can reach: the concurrent design's base
    (the look's applied runs are those started by its n-th run either way); the before/after designs' edit."""
    if design == "concurrent":
        return _upto(base, n, design), applied
    return base, _upto(applied, n, design)


@pytest.mark.parametrize("design", DESIGNS)
def test_the_path_is_the_decisions_statistic_at_every_look_of_each_design(design: str):
    rng = random.Random(f"path-{design}")
    config = MonitorConfig(design=design, design_p0=0.9)
    blind = replace(config, z=NEVER)
    looks_checked = crashes = 0
    for _ in range(150):
        base, applied = _watch(rng, design)
        points = statistic_path(config, base, applied)
        assert [p.n for p in points] == list(range(1, len(points) + 1))  # arms in start order: no gap
        for point in (p for p in points if p.look is not None):
            cut_base, cut_applied = _at_look(design, base, applied, point.n)
            d = decide(blind, cut_base, cut_applied, timedelta(0))
            assert (d.look, d.runs, d.applied_runs) == (point.look, point.n, point.applied_runs)
            assert (d.base_passes, d.applied_passes) == (point.base_passes, point.applied_passes)
            assert d.z == point.z  # the same float: the same helpers on the same runs
            assert d.drop == point.drop
            # The path's conclusion on the runs up to this look is the decision's, by the real boundary.
            real = decide(config, cut_base, cut_applied, timedelta(0))
            path = MonitorPath(cut_base, cut_applied, config)
            assert path.action == real.action
            crossed = next((p for p in path.at_looks() if p.crosses), None)
            if real.action == "rollback":
                assert crossed is not None and (crossed.n, crossed.z) == (real.runs, real.z)
            else:
                assert crossed is None
            looks_checked += 1
            # A crash: a failure of the concurrent and stratified designs, never seen by the seed's.
            compared = cut_applied.passed if design == "concurrent" else \
                [p for p in cut_applied.passed if design != "seed" or p is not None]
            compared = compared[:point.applied_runs]
            crashes += compared.count(None)
            assert point.applied_passes == compared.count(True)
        # And on the whole arms: the decision, and the path's conclusion naming its design.
        decision = decide(config, base, applied, timedelta(0))
        path = MonitorPath(base, applied, config)
        assert path.points == points and path.action == decision.action
        assert path.conclusion().endswith(f"[{path.design_label}]")
    assert looks_checked > 100
    assert crashes > 50 if design != "seed" else crashes == 0


def test_a_crash_moves_the_path_of_the_clustered_designs_and_not_the_seeds():
    base = [True] * 60
    scored = [True, False] * 10
    crashed = Arm(tuple(None if i % 4 == 0 else p for i, p in enumerate([True] * 20)))
    for design in DESIGNS:
        config = MonitorConfig(design=design)
        plain = statistic_path(config, base, scored)[19]
        with_crashes = statistic_path(config, Arm.of(base, "base"), crashed)
        if design == "seed":  # 15 runs with a verdict: the look at 20 is not reached
            assert len(with_crashes) == 15 and all(p.applied_passes == p.applied_runs for p in with_crashes)
        else:  # 5 crashes in 20: five failures
            assert with_crashes[19].applied_passes == 15 and with_crashes[19].z > 0
        assert plain.applied_passes == 10


def test_the_seed_design_on_booleans_is_the_seeds_pooled_z_run_for_run():
    rng = random.Random(9)
    config = MonitorConfig(design="seed")
    for _ in range(200):
        base = [rng.random() < 0.9 for _ in range(rng.randrange(0, 61))]
        applied = [rng.random() < rng.choice([0.95, 0.6]) for _ in range(rng.randrange(0, 70))]
        path = MonitorPath.of_outcomes(base, applied)
        assert path.config == config
        assert len(path.points) == min(len(base), len(applied), LOOKS[-1])
        for point in path.points:
            n = point.n
            assert point.applied_runs == n and point.base_passes == sum(base[:n])
            assert point.z == pytest.approx(pooled_z(point.base_passes, n, point.applied_passes, n), abs=1e-12)
        assert path.action == decide(config, base, applied, timedelta(0)).action
    assert LOOKS == config.looks


def test_the_conclusion_names_the_design_that_decides():
    base = Arm((True,) * 30, tuple(f"s{i // 3}" for i in range(30)), ("add",) * 30, tuple(range(30)))
    applied = Arm((True,) * 11 + (False,) * 9, tuple(f"t{i // 2}" for i in range(20)), ("add",) * 20,
                  tuple(range(100, 120)))
    stratified = MonitorPath.of_arms(("stratified", base, applied))  # a concurrent watch fallen back
    assert stratified.design == "stratified" and stratified.config.looks == LOOKS
    assert stratified.action == "rollback"
    assert stratified.conclusion().startswith("roll back at the look at 20 runs per side")
    assert "[stratified by case" in stratified.conclusion() and "case-stratified" in stratified.statistic
    concurrent = MonitorPath.of_arms(("concurrent", base, applied), MonitorConfig(holdback=0.15))
    assert "[concurrent: 15% of sessions held back]" in concurrent.conclusion()
    assert "session-clustered" in concurrent.statistic
    seed = MonitorPath.of_outcomes([True] * 60, [True] * 25)
    assert seed.conclusion() == ("waiting for the look at 40 runs per side (base 60, applied 25 so far) "
                                 "[seed: pooled z, the base runs before the apply]")
    closed = MonitorPath.of_outcomes([True] * 30, [True] * 25)  # the base side ended at the apply
    assert closed.conclusion().startswith("the look at 40 runs per side cannot be reached")
    assert seed.statistic.startswith("pooled z")
