"""What the run store returns: one frozen record per stored row (``runs``, ``checkpoints``, ``approvals``,
``sessions``, the outage breaker). A leaf: it imports nothing, so the contract, the SQL base and every caller can
import it without importing one another.

Timestamps are UTC strings in one fixed-width format (``_codec.parse_utc`` reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StoredRun:
    """One row of ``runs``: a durable run as the store holds it (not improve's record of a scored probe run)."""

    id: str
    agent: str
    kind: str
    status: str
    input: Any
    output: Any
    attempts: int
    consecutive_failures: int
    last_error: dict[str, Any] | None
    next_attempt_at: str | None
    lease_owner: str | None
    lease_expiry: str | None
    lease_epoch: int
    healed_from: str | None
    note: str | None
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class StepRecord:
    """A completed step: its output is what the step returned, after a JSON round trip."""

    run_id: str
    step: int
    name: str
    output: Any
    saved_at: str
    epoch: int


@dataclass(frozen=True)
class Approval:
    id: str
    run_id: str
    tool_call_id: str | None
    tool_name: str | None
    args: Any
    kind: str
    status: str
    created_at: str
    resolved_at: str | None


@dataclass(frozen=True)
class Session:
    """A conversation. ``version`` is the one read; 0 for a session not saved yet."""

    id: str
    agent: str
    transcript: list[Any]
    turns: int = 0
    pending_turn: str | None = None
    version: int = 0
    updated_at: str | None = None


@dataclass(frozen=True)
class OutageState:
    """The provider-outage breaker as the store holds it (one row shared by every recover() replica).

    Closed while ``paused_since`` is None. Open (the loop paused) from ``paused_since``: then at most one replica
    holds the probe slot (``probe_owner``, until ``probe_expiry``), and no probe starts before ``next_probe_at``.
    """

    failures: int
    paused_since: str | None
    probes: int
    next_probe_at: str | None
    probe_owner: str | None
    probe_run: str | None
    probe_expiry: str | None
    last_error: dict[str, Any] | None
    updated_at: str

    @property
    def paused(self) -> bool:
        return self.paused_since is not None


CLOSED_OUTAGE = OutageState(0, None, 0, None, None, None, None, None, "1970-01-01T00:00:00.000000Z")
