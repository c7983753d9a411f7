"""What every loop action shares: the setup it runs with, its result, the editors' client, runs of the
agent bounded by today's token budget, and the bookkeeping of what they spent."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lousho.agent.verdict import Check
from lousho.improve.cache import Cache, Ledger
from lousho.improve.check_module import CheckModule
from lousho.improve.controls import RateLimited
from lousho.improve.harness import agent_name
from lousho.improve.options import StepOptions
from lousho.improve.result import ImproveResult
from lousho.improve.state import LoopConfig, LoopState, Paths, load_state, now_utc, update
from lousho.models.protocol import ModelClient

if TYPE_CHECKING:
    from lousho.improve.corpus import CheckDecision


@dataclass(frozen=True)
class LoopSetup:
    """What every loop action needs: the directory, its check module, the step's options, the environment.

    ``options`` carries the models, the observe store and the search (proposers, mode, select, parallel);
    the loop sets the rest of each cycle's step from ``improve.json`` and its directory (see
    :meth:`step_options`).
    """

    agent_dir: Path
    check: str | Path | CheckModule | Check
    options: StepOptions = field(default_factory=StepOptions)
    environ: Mapping[str, str] = field(default_factory=dict)
    editor_client: ModelClient | None = None
    rate_limit: bool = False  # a watcher: editor and reflection calls at most editor_calls_per_minute
    clock: Callable[[], datetime] = now_utc
    progress: Callable[[str], None] | None = None

    @property
    def paths(self) -> Paths:
        return Paths(self.agent_dir)

    @property
    def name(self) -> str:
        """The name the agent's runs carry (gen_ai.agent.name); default: agent.toml's, else the directory's."""
        return self.options.agent_name or agent_name(self.agent_dir)

    def step_options(self, config: LoopConfig, token_budget: int) -> StepOptions:
        """A cycle's step: this setup's options, with what the loop owns: recurring failures only in auto
        mode, the quoted-check policy and the gate of ``improve.json`` (the gate when set), the cache in
        ``.lousho/cache`` with fresh probe runs only (a write needs new evidence), and what is left of today's
        tokens."""
        return replace(self.options, agent_name=self.name, recurring_only=config.recurring_only,
                       quoted_checks=config.quoted_policy, cache_dir=self.paths.cache, cached_probe=False,
                       token_budget=token_budget, gate=config.gate or self.options.gate)


# Errors that end a cycle before its step could judge an edit: the directory, the check module or a model
# was unusable (a bad directory, a model that is down or refuses the key, so no run was scored or every
# editor failed). The regression that started the cycle is still unexamined, so the daemon's trigger tries
# again, with backoff, until the cause is fixed.
NOT_STARTED = frozenset({
    "LOUSHO_AGENT_DIR_INVALID", "LOUSHO_IMPROVE_HARNESS_INVALID", "LOUSHO_IMPROVE_CHECK_INVALID",
    "LOUSHO_IMPROVE_CHECK_RAISED", "LOUSHO_IMPROVE_NO_MODEL", "LOUSHO_IMPROVE_NO_PROBE",
    "LOUSHO_IMPROVE_EDITORS_FAILED",
    "LOUSHO_IMPROVE_PROBE_FAILED", "LOUSHO_MODELS_CONFIG_INVALID", "LOUSHO_PROVIDER_AUTH",
    "LOUSHO_PROVIDER_RATE_LIMIT", "LOUSHO_PROVIDER_TIMEOUT", "LOUSHO_PROVIDER_UNKNOWN",
})


@dataclass(frozen=True)
class CycleResult:
    outcome: str  # refused, paused, kept-base, canary-rejected, applied, rolled-back, queued, traffic, error
    reason: str
    step: ImproveResult | None = None
    proposal_id: str | None = None
    revision: str | None = None
    checks: tuple[CheckDecision, ...] = ()
    tokens: int = 0
    code: str | None = None  # the error's code, for outcome "error"

    @property
    def retry(self) -> bool:
        """Did the cycle fail before its step could judge anything (see NOT_STARTED)? Then retry it."""
        return self.outcome == "error" and self.code in NOT_STARTED

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason": self.reason, "proposal_id": self.proposal_id,
                "revision": self.revision, "checks": [c.to_dict() for c in self.checks], "tokens": self.tokens,
                "code": self.code, "retry": self.retry, "step": self.step.to_dict() if self.step else None}


def editor_client(setup: LoopSetup, config: LoopConfig) -> ModelClient | None:
    """The editors' (and reflection's) client: the setup's, else one for the editor model; rate-limited
    in a watcher. None when there is no model for them."""
    client = setup.editor_client
    model = setup.options.editor_model or setup.options.model
    if client is None and model is not None:
        client = model.client(setup.environ)
    if client is not None and setup.rate_limit:
        client = RateLimited(client, config.editor_calls_per_minute)
    return client


def spend(paths: Paths, tokens: int) -> None:
    """Count ``tokens`` against today's budget."""
    if tokens:
        def add(state: LoopState) -> None:
            state.tokens_today += tokens

        update(paths, add)


class LoopRuns:
    """A runner with its own throwaway directory and a ledger bounded by what is left of today's tokens;
    what it spent is recorded when the block ends, also when it ends by an exception."""

    def __init__(self, setup: LoopSetup, module: CheckModule, config: LoopConfig) -> None:
        self.setup, self.module = setup, module
        state = load_state(setup.paths)
        state.roll_day(setup.clock())
        self.ledger = Ledger(token_limit=max(config.tokens_per_day - state.tokens_today, 0))

    def __enter__(self) -> tuple[Any, Ledger]:
        # The step (and through it the gate and SciPy) is imported where runs are made, not where the loop's
        # setup is: `improve reject`, `rollback` and `status` never run the agent.
        from lousho.improve.step import build_runner

        self._tmp = tempfile.TemporaryDirectory(prefix="lousho-loop-")
        runner = build_runner(self.setup.agent_dir, self.module, self.setup.options.model, self.setup.environ,
                              Path(self._tmp.name), Cache(None), self.ledger)
        return runner.run_many, self.ledger

    def __exit__(self, *exc: object) -> None:
        self._tmp.cleanup()
        spend(self.setup.paths, self.ledger.tokens)
