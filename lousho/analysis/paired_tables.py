"""The paired gate's section of docs/statistics.md: its error rates, power and runs beside the seeds' gate.

Every figure is simulated by ``paired_operating.simulate_rows`` (both gates, the same streams), with a fixed
seed, so the page is reproducible; the recorded-rate column is ``false_accept_rate`` at the true per-case rates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np

from lousho.analysis import gate_operating as oc
from lousho.analysis import paired_operating as po

REPLICATES = 20_000
SIZES = (6, 12, 24, 30)


def mixes(n: int) -> dict[str, np.ndarray]:
    """The per-case rate vectors of the page: flat, easy/hard (0.97/0.55, 30% hard), Beta(0.3, 0.7)."""
    hard = np.arange(n) % 10 < 3
    return {"all at 0.5": np.full(n, 0.5), "all at 0.9": np.full(n, 0.9),
            "easy/hard 70/30": np.where(hard, 0.55, 0.97),
            "Beta(0.3, 0.7)": np.random.default_rng(n).beta(0.3, 0.7, n)}


@lru_cache(maxsize=1)  # fixed seeds: the same text every time, so a process renders the page's slowest part once
def section(table: Callable[[Sequence[str], Sequence[Sequence[str]]], str]) -> str:
    rows = []
    for n in SIZES:
        held = np.full(max(n // 3, 1), 0.8)
        for name, p in mixes(n).items():
            fig = _figures(p, held)
            recorded = po.false_accept_rate(p, replicates=REPLICATES).rate
            pooled = oc.training_gate_rate([(p.mean(), p.mean())] * n)
            rows.append([str(n), name, f"{fig['paired']:.3f}", f"{recorded:.3f}", f"{fig['paired3']:.3f}",
                         f"{fig['seed']:.3f}", f"{fig['seed3']:.3f}", f"{pooled:.3f}",
                         f"{fig['runs']:.0f} / {fig['seed_runs']:.0f}"])
    power = []
    for n in SIZES:
        row = [str(n)]
        for base in (0.1, 0.3, 0.5, 0.7):
            p = np.full(n, base)
            row.append(" / ".join(f"{_accept(p, p + 0.2, gate):.2f}" for gate in ("paired", "seed")))
        power.append(row)
    no_effect = table(["cases", "per-case rates", "paired, 1 candidate", "paired, recorded", "paired, 3 candidates",
                       "seed, 1", "seed, 3", "seed, recorded (one pooled rate)",
                       "runs: paired / seed"], rows)
    lift = table(["cases", "0.1 → 0.3", "0.3 → 0.5", "0.5 → 0.7", "0.7 → 0.9"], power)
    return f"""## 9. The paired gate (the default) against the seeds' gate

The paired gate tests the candidate against the base **case by case**: given each training case's total
passes over both sides, the candidate's share is hypergeometric whatever the case's pass rate, and the
p-value P(ΣC* ≥ ΣC) is the convolution of those laws (`lousho/analysis/paired.py`). Stage 1 (3 runs a
side): accept at p ≤ 0.01, go on only at p ≤ 0.25 with the candidate ahead; stage 2 (6 cumulative):
accept at p ≤ 0.04. So P(accept | no effect) ≤ 0.05 for every mix of cases; with c candidates tried in
one step each is tested at 0.05/c. Held-out cases reject at a one-sided harm p ≤ 0.10, over all of
them or on any one at 0.10 divided by their number. `lousho improve
--gate seed` (or `"gate": "seed"` in improve.json) runs the seeds' rule instead.

P(some candidate accepted | no effect), {REPLICATES:,} replicates each (s.e. about 0.001), the
candidates tried in turn against one set of base runs, held-out cases (a third as many, at 0.8) included.
"Recorded" is the formula a decision records, at the true per-case rates: for the paired gate its
conditional Monte Carlo rate, for the training test alone (the held-out test only lowers it); for the
seeds' gate the oldest record, the exact rate at one pooled pass rate, far from the truth on mixed
cases. A decision does not know the true rates and needs none at stage 1: under no effect a case's runs
on both sides are exchangeable, so it takes the rate given each case's pooled passes over both sides'
stage-1 runs, the paired test's stage 2 with its totals drawn from empirical-Bayes posteriors fitted to
those runs (docs/improve.md gives that record's bias).
Runs: mean agent runs per step with no effect, both sides, 1 candidate. Over every rate vector of the tests
(tests/analysis/test_paired_gate.py) the paired gate spends at most 1.21 times the seeds' runs with 1 candidate
and 1.245 times with 3; with 9 candidates and 6-12 cases up to 1.38 times, since the seeds' gate stops at its
first false accept, which it makes in 12-41% of steps at 6 cases.

{no_effect}

P(accept) when the candidate lifts **every** training case by 0.2 (paired / seed, 1 candidate): the seeds'
"no case worse" gets stricter as cases are added; the paired test gets stronger.

{lift}"""


def _figures(p: np.ndarray, held: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for gate in ("paired", "seed"):
        for c in (1, 3):
            pb, hb = np.tile(p, (REPLICATES, 1)), np.tile(held, (REPLICATES, 1))
            done, runs = po.simulate_rows(pb, pb, hb, hb, gate=gate, candidates=c, seed=c)
            out[gate + ("3" if c == 3 else "")] = float(done.mean())
            if c == 1:
                out["runs" if gate == "paired" else "seed_runs"] = float(runs.mean())
    return out


def _accept(p: np.ndarray, lifted: np.ndarray, gate: str) -> float:
    empty = np.zeros((REPLICATES, 0))
    done, _ = po.simulate_rows(np.tile(p, (REPLICATES, 1)), np.tile(lifted, (REPLICATES, 1)), empty, empty,
                               gate=gate, seed=2)
    return float(done.mean())
