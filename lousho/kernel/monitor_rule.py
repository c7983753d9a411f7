"""The seeds' monitor rule on pass/fail counts (seed §4.3). A leaf module: it imports nothing of ours.

One definition for every part that applies the rule: analysis (its boundaries and the exact DP), the
daemon's regression trigger (observe, which may import no other part) and the page. A look at ``n`` runs
per side rolls back when the pass rate dropped by more than ``MIN_DROP`` and the pooled two-proportion z
on the cumulative counts is at least ``Z``. Sign convention: a positive z or drop means the applied
(later) side passes *less* often than the base.
"""

from __future__ import annotations

import math

# The seeds' numbers: looks at 20, 40 and 60 runs per side; a drop over 0.05 at z >= 2.1.
LOOKS = (20, 40, 60)
Z = 2.1
MIN_DROP = 0.05
# Counts sit on a lattice: absorb float noise so "drop > 0.05" and "z >= 2.1" mean exactly that when a
# count lands on the boundary (1.00 - 0.95 is 0.0500000000000000444 in floats).
EPS = 1e-9


def pooled_z(base_passes: int, base_runs: int, applied_passes: int, applied_runs: int) -> float:
    """The pooled z of base minus applied: ``(p_b - p_a) / sqrt(p(1 - p)(1/n_b + 1/n_a))``, ``p`` pooled.

    When both sides all pass or all fail the standard error is 0 and there is no evidence of a drop: 0.
    """
    pooled = (base_passes + applied_passes) / (base_runs + applied_runs)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / base_runs + 1.0 / applied_runs))
    return (base_passes / base_runs - applied_passes / applied_runs) / se if se > 0 else 0.0


def rolls_back(base_passes: int, applied_passes: int, runs: int, *, z: float = Z, min_drop: float = MIN_DROP) -> bool:
    """Whether a look at ``runs`` runs per side, with these passes on each side, rolls the edit back."""
    return (pooled_z(base_passes, runs, applied_passes, runs) >= z - EPS
            and base_passes - applied_passes > min_drop * runs + EPS)
