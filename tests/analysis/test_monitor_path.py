"""The monitor's path (page and plot draw it): its looks decide exactly as the monitor does."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from lousho.analysis.monitor import MonitorConfig, decide
from lousho.analysis.monitor_path import MonitorPath
from lousho.analysis.stats import pooled_z
from lousho.kernel.monitor_rule import LOOKS


def test_the_monitor_path_decides_as_analysis_monitor_does_at_every_look():
    rng = random.Random(9)
    config = MonitorConfig()
    for _ in range(400):
        p_base, p_applied = rng.choice([0.9, 0.8, 0.5]), rng.choice([0.95, 0.8, 0.6, 0.3])
        base = [rng.random() < p_base for _ in range(rng.randrange(0, 61))]
        applied = [rng.random() < p_applied for _ in range(rng.randrange(0, 70))]
        path = MonitorPath(tuple(base), tuple(applied))
        decision = decide(config, base, applied, timedelta(0))
        crossed = next((p for p in path.at_looks() if p.crosses), None)
        if decision.action == "rollback":
            assert crossed is not None and crossed.n == decision.runs
        else:
            assert crossed is None
            assert (decision.action == "keep") == path.conclusion().startswith("keep")
        for point in path.points:
            assert point.z == pytest.approx(pooled_z(point.base_passes, point.n, point.applied_passes, point.n))
    assert LOOKS == config.looks
