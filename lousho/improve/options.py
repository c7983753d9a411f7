"""``StepOptions``: how one improvement step searches, as one frozen value.

The CLI builds it once from its flags; the loop builds it for each cycle from its setup and
``improve.json`` (``LoopSetup.step_options``), so a step run by hand and a step run by the loop read
the same options the same way. ``validate`` refuses a value no step can use, with a stable code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lousho.analysis.gates import DEFAULT_RULES, GateRules
from lousho.improve.errors import OptionInvalid
from lousho.models.config import ModelConfig

Mode = Literal["default", "seq"]
QuotedChecks = Literal["reject", "flag"]
FailureNames = Literal["real", "none", "shuffled"]
GateName = Literal["paired", "seed"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "mode": ("default", "seq"), "gate": ("paired", "seed"),
    "quoted_checks": ("reject", "flag"), "failure_names": ("real", "none", "shuffled"),
}


@dataclass(frozen=True)
class StepOptions:
    """Every choice of one step (seed §3.2, §3.3 and the Harness² options); the defaults are the seeds'."""

    model: ModelConfig | None = None  # the reference agent's model (a check module's probe() needs none)
    editor_model: ModelConfig | None = None  # default: ``model``
    # Also take cases from failed runs of the live revision in this daemon URL or DuckDB file.
    observe: str | Path | None = None
    observe_token: str | None = None
    observe_ca_cert: Path | None = None  # a PEM certificate to trust for an https daemon
    agent_name: str | None = None  # the runs' gen_ai.agent.name (default: agent.toml's, else the directory's)
    recurring_only: bool = False  # take only failures seen in two or more live runs (the loop's auto mode)
    proposers: int = 1  # k invariant and k domain editors (in seq mode: k rounds)
    mode: Mode = "default"  # seq: each round edits the last round's checkpoint
    select: bool = False  # gate every candidate and let a blind selector pick among the passers
    parallel: bool = False  # editors, then their probes, two at a time
    cache_dir: Path | None = None  # replay byte-identical editor calls from here (and keep its ledger)
    cached_probe: bool = False  # with cache_dir, also replay probe runs (old evidence, never a fresh run)
    quoted_checks: QuotedChecks = "reject"  # an edit that adds a failed check's name: reject or flag it
    failure_names: FailureNames = "real"  # the failure-name study: real, none (hidden) or shuffled names
    rules: GateRules = DEFAULT_RULES
    # paired: the case-matched two-stage exact test (lousho.analysis.paired); seed: "+2 of 3, held-out 2/6"
    gate: GateName = "paired"
    token_budget: int | None = None  # stop the step once its model calls spent this many tokens

    def validate(self) -> None:
        """Raise ``OptionInvalid`` for a value outside its range (the type hints name the allowed ones)."""
        proposers = self.proposers
        if isinstance(proposers, bool) or not isinstance(proposers, int) or not 1 <= proposers <= 4:
            raise OptionInvalid(f"proposers={proposers!r}: expected 1 to 4",
                                hint="proposers is k editors of each role, from 1 to 4")
        for name, allowed in _CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise OptionInvalid(f"{name}={value!r}: expected one of {allowed}", hint=f"{name} is one of {allowed}")
