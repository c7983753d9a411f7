"""What the recover loop does with one pending run: a pure decision over the run's stored state.

The loop decides with the run's record as it claimed it (under its lease), so two replicas never act on one run at
once, and again right after a failed attempt with the record the attempt left. Rules (seed 000 "Recover a run
now"; DESIGN §5):

- a run whose last error is not retryable (a 400 from the provider, a bad key, ``LOUSHO_RUN_NO_PROGRESS``) is left
  alone; so is anything not pending (the store never lists finished, stopped, failed, quarantined runs, nor runs
  awaiting a person);
- below ``max_attempts`` failures in a row: resume it;
- at the cap: a ``.heal`` fork is quarantined (and its original with it); an original whose fork exists waits for
  the fork, is deleted when the fork finished, is quarantined when the fork ended any other way; otherwise it
  gets its fork (with ``retry_with_diagnosis``, when ``heal.can_heal``) or is quarantined.
"""

from __future__ import annotations

from dataclasses import dataclass

from lousho.recover.heal import is_heal_fork
from lousho.recover.records import StoredRun

PENDING = ("interrupted", "running")
FORK_GAVE_UP = ("quarantined", "failed", "stopped")

RESUME = "resume"
QUARANTINE = "quarantine"
HEAL = "heal"
WAIT_FOR_FORK = "wait-for-fork"
FORK_FINISHED = "fork-finished"
LEAVE = "leave"


@dataclass(frozen=True)
class Decision:
    action: str  # one of the constants above
    rule: str  # why, as logged: "due", "cap", "not-retryable", "not-pending", "heal-failed", "healing", ...


def retryable(run: StoredRun) -> bool:
    return run.last_error is None or bool(run.last_error.get("retryable", True))


def at_cap(run: StoredRun, max_attempts: int) -> bool:
    return run.consecutive_failures >= max_attempts


def decide(run: StoredRun, *, max_attempts: int, heal: bool, fork: StoredRun | None) -> Decision:
    """The action for ``run``.

    Args:
        max_attempts: failures in a row that quarantine a run (seed default 10).
        heal: whether this run may get a ``.heal`` fork (``retry_with_diagnosis`` and ``heal.can_heal``).
        fork: the run's ``.heal`` fork if one exists (looked up by the caller only at the cap).
    """
    if not retryable(run):  # first: a run that failed for good is ``failed``, not pending, and this is why
        return Decision(LEAVE, "not-retryable")
    if run.status not in PENDING:
        return Decision(LEAVE, "not-pending")
    if not at_cap(run, max_attempts):
        return Decision(RESUME, "due")
    if is_heal_fork(run):
        return Decision(QUARANTINE, "heal-cap")
    if fork is not None:
        if fork.status == "finished":
            return Decision(FORK_FINISHED, "healed")
        if fork.status in FORK_GAVE_UP:
            return Decision(QUARANTINE, "heal-failed")
        return Decision(WAIT_FOR_FORK, "healing")
    if heal:
        return Decision(HEAL, "cap")
    return Decision(QUARANTINE, "cap")
