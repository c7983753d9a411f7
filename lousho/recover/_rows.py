"""Rows to records, values to columns, and the statements ``store_sql.SqlRunStore`` shares: pure helpers.

The column lists fix the order every ``SELECT`` uses, so a row tuple maps to a record by position.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lousho.recover import schema
from lousho.recover._codec import decode, encode, format_utc, parse_utc
from lousho.recover.errors import CRASHED_ERROR, CheckpointCorrupt
from lousho.recover.records import Approval, Session, StepRecord, StoredRun

RUN_COLUMNS = (
    "id, agent, kind, status, input, output, attempts, consecutive_failures, last_error, next_attempt_at, "
    "lease_owner, lease_expiry, lease_epoch, healed_from, note, created_at, updated_at"
)
STEP_COLUMNS = "run_id, step, name, output, saved_at, epoch"
APPROVAL_COLUMNS = "id, run_id, tool_call_id, tool_name, args, kind, status, created_at, resolved_at"
SESSION_COLUMNS = "id, agent, transcript, turns, pending_turn, version, updated_at"
TERMINAL = ("finished", "stopped")  # resume refuses these

# Statements both backends run, written with ``?`` (the Postgres backend hands psycopg ``%s``); none holds a ``%``.
# A checkpoint: the step copied in only from a runs row still at the writer's epoch (the fence is the insert itself),
# with the history limit of the store that saved it (schema.HISTORY_VIEW); ``{lock}`` is the row lock on that runs
# row, where the backend locks rows. Parameters: run_id, step, name, output, saved_at, epoch, history_limit, run_id,
# epoch.
SAVE_STEP = (
    f"INSERT INTO checkpoints ({STEP_COLUMNS}, history_limit) SELECT ?, ?, ?, ?, ?, ?, ? FROM runs "
    "WHERE id = ? AND lease_epoch = ?{lock} ON CONFLICT (run_id, step) DO NOTHING"
)
# A step copied into a fork. Parameters: the STEP_COLUMNS values, then history_limit.
COPY_STEP = f"INSERT INTO checkpoints ({STEP_COLUMNS}, history_limit) VALUES (?, ?, ?, ?, ?, ?, ?)"
# Progress resets the failure count; the WHERE skips the row write when it is 0 already. Parameters: now, run_id.
RESET_FAILURES = "UPDATE runs SET consecutive_failures = 0, updated_at = ? WHERE id = ? AND consecutive_failures <> 0"


# The recover loop's claim rule (RunStore.list_due). A lease is free once it expired;
# a running run with no lease owner at all was started outside any lease, so only its age (updated_at) says its
# process is gone.
#
# A run paused for a person whose approvals are all resolved is claimable too, once ``orphan_seconds`` passed since
# the last decision (``resolve_approval`` touches the run's updated_at): the one who decided (``lousho runs approve``)
# resumes it at once, and if that process died in between, nothing else ever would. The grace keeps the loop from
# racing a resume that is on its way. Parameters: now, orphan_before, now, orphan_before.
CLAIMABLE = (
    "((status IN ('interrupted', 'running') AND (lease_expiry IS NULL OR lease_expiry <= ?) "
    "AND (status = 'interrupted' OR lease_owner IS NOT NULL OR updated_at <= ?)) "
    "OR (status = 'awaiting_approval' AND (lease_expiry IS NULL OR lease_expiry <= ?) AND updated_at <= ? "
    "AND NOT EXISTS (SELECT 1 FROM approvals WHERE approvals.run_id = runs.id AND approvals.status = 'pending')))"
)
DUE = "(next_attempt_at IS NULL OR next_attempt_at <= ?)"  # parameter: now


def claimable(now: str, orphan_before: str) -> tuple[str, str, str, str]:
    """CLAIMABLE's parameters."""
    return now, orphan_before, now, orphan_before
# A batch claim (RunStore.claim_due): the due runs, oldest first, then one write that takes the lease of those read.
# Parameters: CLAIMABLE's, now, limit; then CLAIM's (owner, lease_expiry, now, CRASHED) and the ids.
CLAIM_DUE_SELECT = f"SELECT {RUN_COLUMNS} FROM runs WHERE {CLAIMABLE} AND {DUE} ORDER BY created_at, id LIMIT ?"
# A claim also settles an attempt that never ended: a run still ``running`` when claimed had its process die (or
# lose its lease) mid-attempt, so it is counted as a failure in a row (``errors.CRASHED_ERROR``, the parameter after
# ``now``) and becomes ``interrupted``, in the same write: a run that kills every process that runs it reaches the
# cap, and one the claimer hands back unstarted stays claimable (a ``running`` run without a lease owner is not).
# Each right-hand side reads the row as it was before the UPDATE, on both databases.
CLAIM = (
    "UPDATE runs SET lease_owner = ?, lease_expiry = ?, lease_epoch = lease_epoch + 1, updated_at = ?, "
    "consecutive_failures = consecutive_failures + CASE WHEN status = 'running' THEN 1 ELSE 0 END, "
    "last_error = CASE WHEN status = 'running' THEN ? ELSE last_error END, status = 'interrupted' WHERE "
)
CRASHED = encode(CRASHED_ERROR, run_id="-")

# The outage breaker's one row (RunStore.get_outage), and what closing it clears.
OUTAGE_ROW = (
    "SELECT failures, paused_since, probes, next_probe_at, probe_owner, probe_run, probe_expiry, last_error, "
    "updated_at FROM recover_outage WHERE id = 'provider'"
)
CLEAR_PAUSE = ("paused_since = NULL, probes = 0, next_probe_at = NULL, probe_owner = NULL, probe_run = NULL, "
               "probe_expiry = NULL")
# begin_attempt's UPDATE: ``{takeover}`` clears the old lease on a takeover, ``{where}`` says which statuses it
# resumes. Parameters: the epoch's increment (0 with a lease taken at an epoch, 1 for a takeover), now, run_id.
BEGIN = ("UPDATE runs SET attempts = attempts + 1, status = 'running', lease_epoch = lease_epoch + ?, {takeover}"
         "updated_at = ? WHERE id = ? AND {where}")
# Resumable by the row alone: the common case (an interrupted or running run, as every run the loop claims is).
RESUMABLE = "status NOT IN ('finished', 'stopped', 'awaiting_approval')"
# Any run but a finished or stopped one, or one awaiting a pending approval.
NOT_AWAITING = (
    "status NOT IN ('finished', 'stopped') AND NOT (status = 'awaiting_approval' AND EXISTS ("
    "SELECT 1 FROM approvals WHERE approvals.run_id = runs.id AND approvals.status = 'pending'))"
)


def claimed(row: tuple[Any, ...], owner: str, expiry: str, now: str, location: str) -> StoredRun | CheckpointCorrupt:
    """A row read by ``CLAIM_DUE_SELECT`` as ``CLAIM`` leaves it; a row that does not decode is its error."""
    try:
        run = run_record(row, location)
    except CheckpointCorrupt as e:
        return e
    if run.status == "running":
        run = dataclasses.replace(run, consecutive_failures=run.consecutive_failures + 1,
                                  last_error=dict(CRASHED_ERROR))
    return dataclasses.replace(run, lease_owner=owner, lease_expiry=expiry, lease_epoch=run.lease_epoch + 1,
                               updated_at=now, status="interrupted")


def run_record(row: tuple[Any, ...], location: str) -> StoredRun:
    run_id = row[0]

    def json_of(text: str | None, column: str) -> Any:
        return decode(text, run_id=run_id, step=None, column=column, location=location)

    return StoredRun(
        id=run_id, agent=row[1], kind=row[2], status=row[3], input=json_of(row[4], "input"),
        output=json_of(row[5], "output"), attempts=row[6], consecutive_failures=row[7],
        last_error=json_of(row[8], "last_error"), next_attempt_at=row[9], lease_owner=row[10],
        lease_expiry=row[11], lease_epoch=row[12], healed_from=row[13], note=row[14], created_at=row[15],
        updated_at=row[16],
    )


def step_record(row: tuple[Any, ...], location: str) -> StepRecord:
    output = decode(row[3], run_id=row[0], step=row[1], column="output", location=location)
    return StepRecord(run_id=row[0], step=row[1], name=row[2], output=output, saved_at=row[4], epoch=row[5])


def approval_record(row: tuple[Any, ...], location: str) -> Approval:
    args = decode(row[4], run_id=row[1], step=None, column=f"args of approval {row[0]}", location=location)
    return Approval(*row[:4], args, *row[5:])


def session_record(row: tuple[Any, ...], location: str) -> Session:
    transcript = decode(row[2], run_id=row[0], step=None, column="transcript", location=location, owner="session")
    return Session(row[0], row[1], transcript, row[3], row[4], row[5], row[6])


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")


def column_value(run_id: str, name: str, value: Any) -> Any:
    """A python value as the ``runs`` column ``name`` stores it."""
    if name in ("output", "last_error"):
        return None if value is None else encode(value, run_id=run_id)
    if name in ("next_attempt_at", "lease_expiry"):
        if isinstance(value, str):
            value = parse_utc(value)  # validates the stored format
        return None if value is None else format_utc(value)
    if name == "status":
        check_choice("status", value, schema.RUN_STATUSES)
    return value
