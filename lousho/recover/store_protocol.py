"""The run store's contract: ``RunStore``, the protocol every backend implements, and the rules it states.

Every method is one short transaction: it either commits whole or changes nothing. Writes that change who owns
a run, or that a stale owner must not make, are *fenced*: they carry the lease epoch their writer opened the run
with and are one conditional write (``... WHERE id = ? AND lease_epoch = ?``, STYLE §9); when the epoch moved,
nothing is written and ``LeaseLost`` is raised. Stores are safe to share between threads of one process; each
process opens its own (a connection does not survive ``fork``).

A backend implements ``RunStore`` structurally (both SQL backends through ``store_sql.SqlRunStore``); tests run one
suite against every backend. A leaf beside ``records``: backends and callers import it, it imports neither.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from lousho.recover.errors import CheckpointCorrupt
from lousho.recover.records import Approval, OutageState, Session, StepRecord, StoredRun

DEFAULT_HISTORY_LIMIT = 50  # the SDK's DEFAULT_CHECKPOINT_HISTORY_LIMIT; 0 disables the history ring
UNFINISHED = ("running", "interrupted", "awaiting_approval", "failed", "stopped", "quarantined")

# Fields ``update_run`` may set. lease_epoch is not among them: only begin_attempt and bump_epoch move it.
UPDATABLE = frozenset({
    "status", "output", "last_error", "attempts", "consecutive_failures", "next_attempt_at",
    "lease_owner", "lease_expiry", "note",
})


def check_history_limit(history_limit: object) -> None:
    """The SDK's ``resolveHistoryLimit`` rule: a non-negative integer."""
    if isinstance(history_limit, bool) or not isinstance(history_limit, int) or history_limit < 0:
        raise ValueError(f"history_limit must be a non-negative integer, not {history_limit!r}")


class RunStore(Protocol):
    """Durable state of runs: rows, step checkpoints with their history, approvals and sessions.

    Atomicity: each method is one transaction. Idempotency is stated per method. Unknown run ids raise
    ``RunNotFound`` from writes and give ``None`` / empty results from reads. Stored JSON that does not decode
    raises ``CheckpointCorrupt``; a value that is not JSON raises ``OutputNotJson`` before anything is written.
    """

    location: str  # the file, or the URL with its password hidden: what hints name
    history_limit: int

    def create_run(
        self, run_id: str, *, agent: str, kind: str, input: Any, status: str = "running", attempts: int = 0,
    ) -> StoredRun:
        """Insert a run at lease epoch 0. Refuses an existing id (``RunExists``), so a repeat is harmless."""
        ...

    def get_run(self, run_id: str) -> StoredRun | None: ...

    def list_runs(self, statuses: Iterable[str] | None = None, agent: str | None = None) -> list[StoredRun]:
        """Runs in creation order, optionally filtered by status and agent."""
        ...

    def update_run(self, run_id: str, *, epoch: int | None = None, **fields: Any) -> StoredRun:
        """Set ``UPDATABLE`` fields (``next_attempt_at``/``lease_expiry`` take aware datetimes).

        With ``epoch``, fenced: written only while the run is at that epoch, else ``LeaseLost``.
        """
        ...

    def record_failure(
        self, run_id: str, error: dict[str, Any], *, status: str | None = None,
        next_attempt_at: datetime | None = None, count_attempt: bool = True, epoch: int | None = None,
    ) -> StoredRun:
        """attempts + 1 (unless ``count_attempt`` is false: the attempt was counted when it began),
        consecutive_failures + 1, last_error = ``error``; status and next_attempt_at when given. Fenced with
        ``epoch``. Not idempotent: each call is one more failure.
        """
        ...

    def begin_attempt(self, run_id: str, *, epoch: int | None = None) -> StoredRun:
        """Open a new execution of the run: one conditional write sets status ``running`` and attempts + 1.

        Without ``epoch`` it also bumps lease_epoch (a takeover: any older holder is fenced out from now on) and
        clears lease_owner and lease_expiry (the old lease means nothing now; an expired one left behind would let
        a recover loop claim the run at once from the person who just resumed it).
        With ``epoch`` (a lease already taken at that epoch) the epoch must match (``LeaseLost``) and is kept.
        Refuses finished and stopped runs (``RunNotResumable``) and a run awaiting a pending approval
        (``RunAwaitingApproval``); both checks sit in the same WHERE, so they cannot race a status change.
        """
        ...

    def bump_epoch(self, run_id: str, expected: int | None = None) -> int:
        """Compare-and-set lease_epoch from ``expected`` (or from its current value) to one more; returns it.

        A mismatch raises ``LeaseLost`` (someone else moved it first). Every writer still holding an older
        epoch is refused from this commit on. Not idempotent: each success is a new epoch.
        """
        ...

    def save_step(self, run_id: str, step: int, name: str, output: Any, epoch: int) -> StepRecord:
        """Record a completed step: output and done marker (the checkpoint row) in one transaction.

        Fenced: the transaction starts with ``UPDATE runs ... WHERE id = ? AND lease_epoch = ?`` (which also
        resets consecutive_failures: progress), so a writer whose epoch moved writes nothing and gets
        ``LeaseLost``. Idempotent: if the step is recorded already, the first record stands and is returned
        (DBOS's per-step primary key). Appends to the history ring unless ``history_limit`` is 0.
        """
        ...

    def load_steps(self, run_id: str) -> dict[int, StepRecord]: ...

    def history(self, run_id: str, limit: int = DEFAULT_HISTORY_LIMIT) -> list[StepRecord]:
        """The newest ``limit`` entries of the run's history ring, newest first; [] when unknown."""
        ...

    def fork(self, run_id: str, from_step: int, new_id: str, note: str | None = None) -> StoredRun:
        """A new run that re-runs ``run_id`` from ``from_step``: steps 0 .. from_step - 1 are copied, step
        ``from_step`` on are not (DBOS ``fork_workflow(start_step)``). ``from_step`` is a recorded step or the
        next one (``len(steps)``: copy every step and re-run the one that failed, the ``.heal`` fork).

        The new run has the same agent, kind and input, status ``interrupted``, attempts 0, epoch 0,
        ``healed_from = run_id`` and ``note``; the source is untouched. Refuses an existing ``new_id``
        (``RunExists``, so concurrent forks make one) and any other step (``CheckpointNotFound``, listing the
        steps kept).
        """
        ...

    def delete_run(self, run_id: str) -> bool:
        """Delete the run, its steps, history and approvals. Idempotent: False when there was nothing."""
        ...

    def create_approval(
        self, run_id: str, *, tool_call_id: str | None, tool_name: str | None, args: Any, kind: str = "tool",
        approval_id: str | None = None, pause_epoch: int | None = None,
    ) -> Approval:
        """A pending approval (a random id unless given; ``ApprovalExists`` on a taken one).

        With ``pause_epoch`` the same transaction moves the run to ``awaiting_approval``, fenced by that epoch:
        the approval and the pause commit together or not at all.
        """
        ...

    def get_approval(self, approval_id: str) -> Approval | None: ...

    def list_approvals(self, run_id: str | None = None, status: str | None = None) -> list[Approval]: ...

    def resolve_approval(self, approval_id: str, approved: bool) -> Approval:
        """Take-once: ``pending`` becomes ``approved``/``denied`` in one conditional write. An unknown or
        already resolved id raises ``ApprovalNotFound``, so of two racing resolvers exactly one wins.
        """
        ...

    def get_session(self, session_id: str) -> Session | None: ...

    def save_session(self, session: Session) -> Session:
        """Optimistic: writes only if the stored version is still ``session.version`` (0: must not exist yet);
        otherwise ``SessionConflict``. Returns the session at its new version.
        """
        ...

    # --- the recover loop: leases and the outage breaker (lousho.recover.loop) ---
    # Times are passed in (``now``), never read from the database's clock, so every replica and every test judges
    # expiry by the same clock it scheduled with. Hosts' clocks must agree to well within a lease period; fencing
    # keeps a skewed host from writing over a newer holder all the same (it only costs duplicated work).

    def list_due(self, *, now: datetime, orphan_before: datetime, limit: int = 1000) -> list[str]:
        """Ids of the runs ``claim_run`` would claim at ``now``, oldest first (``created_at, id``), at most ``limit``.

        Claimable means all of: status ``interrupted`` or ``running``; due (``next_attempt_at`` NULL or <= now);
        lease free (``lease_expiry`` NULL or <= now); and, for a ``running`` run without a lease owner (started
        outside any lease, so nothing says whether its process lives), ``updated_at <= orphan_before``.
        Quarantined, failed, stopped, finished runs and runs awaiting approval are never listed. A read: it may be
        stale by the time it is used, which is harmless because ``claim_run`` re-checks every condition.
        """
        ...

    def claim_run(
        self, run_id: str, *, owner: str, lease_seconds: float, now: datetime, orphan_before: datetime,
        due_only: bool = True,
    ) -> StoredRun | None:
        """Take the run's lease if it is claimable (``list_due``'s conditions; without ``due_only`` the
        ``next_attempt_at`` condition is dropped). One conditional write: lease_owner = ``owner``, lease_expiry =
        now + lease_seconds, lease_epoch + 1, updated_at = now, status = interrupted; a run found ``running`` (its
        last attempt never recorded an ending: its process died) also gets one more failure in a row and
        ``errors.CRASHED_ERROR`` as its last error. Returns the run as claimed, else None (held by a live lease, not
        due, not pending, unknown).

        The epoch bump is the fencing token (STYLE §9): every earlier holder's writes are refused from this commit
        on. Of two racing claimers exactly one gets the record. Not idempotent: the winner's own second claim finds
        its live lease and gets None. Renewing and releasing are fenced ``update_run`` calls at the claimed epoch
        (``lease_expiry=...``; ``lease_owner=None, lease_expiry=None``).
        """
        ...

    def claim_due(
        self, *, owner: str, lease_seconds: float, now: datetime, orphan_before: datetime, limit: int,
    ) -> list[StoredRun | CheckpointCorrupt]:
        """Claim up to ``limit`` of the runs ``list_due`` would list, oldest first, in one transaction: each claimed
        as by ``claim_run`` (lease_owner = ``owner``, lease_expiry = now + lease_seconds, lease_epoch + 1,
        updated_at = now), and returned as claimed. Of replicas claiming at once, each run goes to exactly one
        (SQLite: the write lock spans the read and the write; Postgres: ``FOR UPDATE SKIP LOCKED``, so a replica
        passes over rows another is claiming instead of waiting). A run whose row does not decode is claimed all
        the same, so the next batch moves past it until its lease lapses, and stands in the list as its
        ``CheckpointCorrupt``. Not idempotent: a second call claims the next runs.
        """
        ...

    def get_outage(self) -> OutageState:
        """The breaker as stored (closed, with 0 failures, if the row is missing)."""
        ...

    def record_outcome(
        self, *, provider_failure: bool, now: datetime, threshold: int, first_probe_at: datetime,
        error: dict[str, Any] | None = None,
    ) -> tuple[OutageState, str | None]:
        """Count one resume outcome into the breaker; one transaction. Returns the state after and the transition
        this call made: ``"opened"``, ``"closed"`` or None.

        A provider failure adds 1 to ``failures``; when the breaker is closed and ``failures`` reaches ``threshold``
        it opens: paused_since = now, probes = 0, next_probe_at = first_probe_at, last_error = error, slot free.
        Any other outcome (the provider answered) closes it: failures 0, paused_since, next_probe_at and the slot
        cleared; when it was closed with 0 failures already, nothing is written (a plain read may decide that: a
        failure committed after the read is ordered after this outcome). Not idempotent (a count).
        """
        ...

    def reserve_probe(self, *, owner: str, now: datetime, expiry: datetime) -> bool:
        """Take the probe slot: one conditional write that succeeds only while paused, with next_probe_at <= now
        (or NULL) and the slot free (no owner, or its expiry <= now). True if ``owner`` now holds it until
        ``expiry``; of two racing replicas exactly one gets True.
        """
        ...

    def renew_probe(self, *, owner: str, expiry: datetime, run_id: str | None = None) -> bool:
        """Extend the slot (and name the run probed, when given) while ``owner`` holds it; False otherwise."""
        ...

    def release_probe(self, *, owner: str, now: datetime, failed: bool, next_probe_at: datetime | None) -> bool:
        """Free the slot if ``owner`` holds it (False otherwise, e.g. a success closed the breaker meanwhile).

        ``failed`` (the probe met a provider failure again): probes + 1 and next_probe_at = ``next_probe_at``.
        Otherwise probes and next_probe_at are unchanged (nothing was probed: no run was due).
        """
        ...

    def close(self) -> None: ...
