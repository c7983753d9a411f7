"""What one step returns: the outcome, the reason, the diff, every decision's evidence, the cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from lousho.improve.records import Case

Outcome = Literal["proposal", "keep-base"]


@dataclass(frozen=True)
class Decision:
    """One thing the step decided, with what it saw: ``kind`` names the part that decided it."""

    kind: str  # search, editor, probe, compose, quoted-check, injection, gate, select
    subject: str
    outcome: str
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "outcome": self.outcome, "reason": self.reason,
                "evidence": self.evidence}


@dataclass(frozen=True)
class Cost:
    requests: int = 0  # model requests sent (agent and editors); cached replays are not requests
    tokens: int = 0
    agent_runs: int = 0  # probe runs made (cached replays not counted)
    editor_requests: int = 0
    cached_runs: int = 0
    cached_editor_calls: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "tokens": self.tokens, "agent_runs": self.agent_runs,
                "editor_requests": self.editor_requests, "cached_runs": self.cached_runs,
                "cached_editor_calls": self.cached_editor_calls}


@dataclass(frozen=True)
class ImproveResult:
    outcome: Outcome
    reason: str
    agent_dir: str
    base_revision: str | None = None
    revision: str | None = None  # the proposal's revision
    diff: str = ""
    files: dict[str, str] = field(default_factory=dict)  # the proposal's changed files, path -> new text
    chosen: str | None = None  # which candidate: composed, an editor's own harness, a seq checkpoint
    decisions: tuple[Decision, ...] = ()
    cost: Cost = field(default_factory=Cost)
    ledger: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    error: dict[str, str] | None = None  # code, message, hint: the step could not run
    training: tuple[Case, ...] = ()
    held_out: tuple[Case, ...] = ()
    helped: tuple[str, ...] = ()  # ids of the training cases the chosen candidate helped at the gate

    @property
    def could_not_run(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason": self.reason, "agent_dir": self.agent_dir,
                "base_revision": self.base_revision, "revision": self.revision, "diff": self.diff,
                "files": self.files, "chosen": self.chosen, "decisions": [d.to_dict() for d in self.decisions],
                "cost": self.cost.to_dict(), "ledger": self.ledger, "flags": list(self.flags), "error": self.error,
                "training": [c.id for c in self.training], "held_out": [c.id for c in self.held_out],
                "helped": list(self.helped)}
