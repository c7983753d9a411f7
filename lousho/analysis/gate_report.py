"""One table of every offline rule's error rates at a base rate and a candidate rate.

Shared by ``lousho stats gate`` and the docs tables, so both print the same figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from lousho.analysis import _checks
from lousho.analysis import gate_operating as oc
from lousho.analysis.gates import DEFAULT_RULES, GateRules

SIMULATION_REPLICATES = 100_000


@dataclass(frozen=True)
class GateRow:
    """One rule: P(event) with no change (both sides at p0) and with the candidate at p1."""

    name: str
    description: str
    no_change: float
    change: float
    method: str


@dataclass(frozen=True)
class GateReport:
    p0: float
    p1: float
    cases: int
    rules: GateRules
    rows: tuple[GateRow, ...]
    note: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: a simulated rate with no defined replicate (NaN) becomes ``None``."""
        out = asdict(self)
        out["rows"] = {
            row.name: {k: _finite_or_none(v) for k, v in asdict(row).items()} for row in self.rows
        }
        return out


def gate_report(
    p0: float,
    p1: float,
    *,
    cases: int = 5,
    cv: float = 0.5,
    rules: GateRules = DEFAULT_RULES,
    seed: int = 0,
) -> GateReport:
    """Every offline rule at (p0, p0) and (p0, p1); every case has the same rates."""
    p0 = _checks.probability("p0", p0)
    p1 = _checks.probability("p1", p1)
    cases = _checks.positive_int("cases", cases)
    cv = _checks.non_negative("cv", cv)
    held = rules.runs + rules.rerun

    def both(
        event: str, description: str, rate: Callable[[float, float], float], method: str = "exact"
    ) -> GateRow:
        return GateRow(event, description, rate(p0, p0), rate(p0, p1), method)

    def cost(base: float, candidate: float) -> float:
        return oc.cost_fail_rate(
            base, candidate, cv, rules, runs=held, replicates=SIMULATION_REPLICATES, seed=seed
        ).rate

    rows = (
        both(
            "training_helped",
            f"one case passes >= {rules.min_gain} more of {rules.runs}",
            lambda b, c: oc.helped_rate(b, c, rules),
        ),
        both(
            "training_worse",
            f"one case passes fewer of {rules.runs}",
            lambda b, c: oc.worse_rate(b, c, rules),
        ),
        both(
            "training_gate",
            f"{cases} cases: one helped, none worse (gate passes)",
            lambda b, c: oc.training_gate_rate([(b, c)] * cases, rules),
        ),
        both(
            "held_out_reject",
            f"held-out case drops, reruns {rules.rerun}, pooled drop >= "
            f"{rules.held_out_min_drop} of {held} (rejects)",
            lambda b, c: oc.held_out_reject_rate(b, c, rules),
        ),
        both(
            "held_out_reject_always_rerun",
            f"pooled drop >= {rules.held_out_min_drop} of {held}, every case rerun "
            "(improve-anchors model)",
            lambda b, c: oc.held_out_reject_rate(b, c, rules, rerun_only_on_drop=False),
        ),
        GateRow(
            "canary_pass",
            f"one case passes >= {rules.canary_min} of {rules.canary_runs} (at the candidate's rate)",
            oc.canary_pass_rate(p0, rules),
            oc.canary_pass_rate(p1, rules),
            "exact",
        ),
        both(
            "paired_sign_gate",
            f"sign test across {cases} cases at one-sided {rules.sign_alpha} (accepts)",
            lambda b, c: oc.sign_gate_rate([(b, c)] * cases, rules),
        ),
        both(
            "cost_fail",
            f"cost per passing run (dollars where priced, else tokens) over +{rules.max_token_rise:.0%} "
            f"(one case, {held} runs a side, lognormal CV {cv})",
            cost,
            f"simulated ({SIMULATION_REPLICATES:,}, seed {seed})",
        ),
    )
    note = (
        "P at p0: both sides pass at p0 (no real change), so for helped, gate, reject and accept "
        "rows it is the false-decision rate; at p1 the candidate passes at p1."
    )
    return GateReport(p0, p1, cases, rules, rows, note)


def _finite_or_none(value: object) -> object:
    return None if isinstance(value, float) and not math.isfinite(value) else value
