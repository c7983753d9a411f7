"""``SqlRunStore``: every ``RunStore`` method, written once in SQL that SQLite and Postgres both run.

A backend subclass supplies only what differs between the two databases (the hooks below): how a transaction is
opened, retried and committed; how a read runs; which rows a statement locks; and how driver errors become ours.
Statements here use ``?`` placeholders; the Postgres backend hands them to psycopg as ``%s``.

Why one text is safe on both. SQLite takes one write lock per file (``BEGIN IMMEDIATE``), so its transactions run
one at a time and no row lock is needed: its ``_for`` is empty. Postgres runs transactions at once under READ
COMMITTED, where each statement sees what committed before it started, and a row lock is what orders two writers
of one run. So every write that reads a run before it writes starts by locking that run's row (``_for`` gives the
clause), and then reads with a statement that starts after the lock was granted, so it sees every commit before
it. One-statement writes (``UPDATE ... WHERE id = ? AND lease_epoch = ?``) need no extra lock: an UPDATE that
waited on a row re-checks its WHERE against the row as committed (Postgres's EvalPlanQual), so a fenced write that
lost the race to ``bump_epoch`` changes nothing.

Fault points (tests only, ``fault=``): ``<method>:before_commit`` inside each write transaction and
``<method>:after_commit`` after it; ``record_outcome:read`` once the breaker row has been read (and locked).
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from lousho.recover import _rows as rows
from lousho.recover import schema
from lousho.recover._codec import decode, encode, format_utc, utc_now
from lousho.recover.errors import (
    ApprovalExists,
    ApprovalNotFound,
    CheckpointCorrupt,
    CheckpointNotFound,
    LeaseLost,
    RunAwaitingApproval,
    RunExists,
    RunNotFound,
    RunNotResumable,
    SessionConflict,
)
from lousho.recover.records import CLOSED_OUTAGE, Approval, OutageState, Session, StepRecord, StoredRun
from lousho.recover.store_protocol import DEFAULT_HISTORY_LIMIT, UPDATABLE, check_history_limit

T = TypeVar("T")


class Result(Protocol):
    """What ``execute`` returns on both drivers (a sqlite3 cursor, a psycopg cursor)."""

    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Cursor(Protocol):
    """What a transaction body is given: a sqlite3 connection, or psycopg's cursor taking ``?``."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Result: ...

    def executemany(self, sql: str, params: Iterable[Sequence[Any]], /) -> Any: ...


class SqlRunStore(ABC):
    """``RunStore`` over SQL (see ``store_protocol.RunStore`` for the contract of each method)."""

    location: str  # the file, or the URL with its password hidden: what hints name

    def __init__(self, location: str, *, history_limit: int, fault: Callable[[str], None] | None) -> None:
        check_history_limit(history_limit)
        self.location = location
        self.history_limit = history_limit
        self._fault = fault
        self._lock = threading.RLock()  # one connection per store object: threads take turns on it

    # --- dialect hooks ---

    @abstractmethod
    def _write(self, point: str, body: Callable[[Cursor], T]) -> T:
        """``body`` as one write transaction that commits whole or not at all; fault points
        ``<point>:before_commit`` (inside it) and ``<point>:after_commit``."""

    def _write_one(self, point: str, body: Callable[[Cursor], T]) -> T:
        """``body``, one statement that sets values (applying it twice leaves what once does), as a write. A backend
        that can run it as its own transaction, retried like a read, overrides this."""
        return self._write(point, body)

    @abstractmethod
    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of one read statement, seeing the last commit."""

    def _for(self, mode: str) -> str:
        """The row-lock clause (``FOR UPDATE`` ...) to append to a SELECT; empty where one writer runs at a time."""
        return ""

    @abstractmethod
    def close(self) -> None: ...

    def _hit(self, point: str) -> None:
        if self._fault is not None:
            self._fault(point)

    # --- rows to records ---

    def _get(self, cur: Cursor, run_id: str, lock: str = "") -> StoredRun:
        row = cur.execute(f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE id = ?{lock}", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(run_id, self.location)
        return rows.run_record(row, self.location)

    def _exists(self, cur: Cursor, run_id: str, lock: str) -> bool:
        """Whether the run exists, taking the row lock ``lock`` names (``_for``) where rows are locked."""
        return cur.execute(f"SELECT 1 FROM runs WHERE id = ?{self._for(lock)}", (run_id,)).fetchone() is not None

    def _refused(self, cur: Cursor, run_id: str, epoch: int | None) -> BaseException:
        """Why a fenced or conditional write on ``run_id`` changed no row (unfenced writes, ``epoch`` None, only
        change no row when the run is missing). A new statement: it reads the run as committed now."""
        row = cur.execute("SELECT lease_epoch FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return RunNotFound(run_id, self.location)
        return LeaseLost(run_id, -1 if epoch is None else epoch, row[0])

    def _approval(self, cur: Cursor, approval_id: str) -> Approval:
        row = cur.execute(f"SELECT {rows.APPROVAL_COLUMNS} FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        return rows.approval_record(row, self.location)

    def _outage(self, row: tuple[Any, ...]) -> OutageState:
        error = decode(row[7], run_id="provider", step=None, column="last_error", location=self.location,
                       owner="outage breaker")
        return OutageState(*row[:7], error, row[8])

    # --- runs ---

    def create_run(
        self, run_id: str, *, agent: str, kind: str, input: Any, status: str = "running", attempts: int = 0,
    ) -> StoredRun:
        rows.check_choice("kind", kind, schema.RUN_KINDS)
        rows.check_choice("status", status, schema.RUN_STATUSES)
        text = encode(input, run_id=run_id)
        now = utc_now()

        def create(cur: Cursor) -> StoredRun:
            # Two creators of one id: the second waits on the first's uncommitted key, then does nothing.
            inserted = cur.execute(
                "INSERT INTO runs (id, agent, kind, status, input, attempts, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (run_id, agent, kind, status, text, attempts, now, now),
            ).rowcount
            if not inserted:
                raise RunExists(run_id, self.location)
            return self._get(cur, run_id)

        return self._write("create_run", create)

    def get_run(self, run_id: str) -> StoredRun | None:
        found = self._read(f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        return rows.run_record(found[0], self.location) if found else None

    def list_runs(self, statuses: Iterable[str] | None = None, agent: str | None = None) -> list[StoredRun]:
        where, params = ["1 = 1"], []
        if statuses is not None:
            wanted = list(statuses)
            where.append(f"status IN ({', '.join('?' * len(wanted))})" if wanted else "1 = 0")
            params += wanted
        if agent is not None:
            where.append("agent = ?")
            params.append(agent)
        sql = f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE {' AND '.join(where)} ORDER BY created_at, id"
        return [rows.run_record(row, self.location) for row in self._read(sql, params)]

    def _fenced_update(self, point: str, run_id: str, sql: str, params: list[Any], epoch: int | None, *,
                       idempotent: bool = False) -> StoredRun:
        """One conditional UPDATE of the run (fenced by ``epoch`` when given): the fence is its WHERE.

        ``idempotent``: the UPDATE sets values, not increments, so it may run as ``_write_one``. Should a retry
        there find the epoch moved on after a first try that did commit, it raises ``LeaseLost`` for a write that
        landed: the caller stops, as it must anyway once another holder took the run.
        """
        if epoch is not None:
            sql, params = sql + " AND lease_epoch = ?", [*params, epoch]

        def update(cur: Cursor) -> StoredRun:
            # The write and its read at once; fetchall, so that SQLite's statement is done before COMMIT.
            found = cur.execute(f"{sql} RETURNING {rows.RUN_COLUMNS}", params).fetchall()
            if not found:
                raise self._refused(cur, run_id, epoch)
            return rows.run_record(found[0], self.location)

        return (self._write_one if idempotent else self._write)(point, update)

    def update_run(self, run_id: str, *, epoch: int | None = None, **fields: Any) -> StoredRun:
        unknown = sorted(set(fields) - UPDATABLE)
        if unknown:
            raise TypeError(f"update_run cannot set {', '.join(unknown)}; it sets {', '.join(sorted(UPDATABLE))}")
        columns = list(fields)  # names from UPDATABLE only, so safe to put in the SQL
        values = [rows.column_value(run_id, name, fields[name]) for name in columns]
        sets = ", ".join(f"{name} = ?" for name in [*columns, "updated_at"])
        return self._fenced_update("update_run", run_id, f"UPDATE runs SET {sets} WHERE id = ?",
                                   [*values, utc_now(), run_id], epoch, idempotent=True)

    def record_failure(
        self, run_id: str, error: dict[str, Any], *, status: str | None = None,
        next_attempt_at: datetime | None = None, count_attempt: bool = True, epoch: int | None = None,
    ) -> StoredRun:
        if status is not None:
            rows.check_choice("status", status, schema.RUN_STATUSES)
        stored = {"message": "", "code": None, "category": None, "retryable": True, **error}
        sql = (
            "UPDATE runs SET attempts = attempts + ?, consecutive_failures = consecutive_failures + 1, "
            "last_error = ?, status = COALESCE(?, status), next_attempt_at = COALESCE(?, next_attempt_at), "
            "updated_at = ? WHERE id = ?"
        )
        params = [int(count_attempt), encode(stored, run_id=run_id), status,
                  rows.column_value(run_id, "next_attempt_at", next_attempt_at), utc_now(), run_id]
        return self._fenced_update("record_failure", run_id, sql, params, epoch)

    def begin_attempt(self, run_id: str, *, epoch: int | None = None) -> StoredRun:
        # A takeover (no epoch) also drops the old lease: its holder is fenced out, and an expired lease left
        # behind would make the run claimable by a recover loop at once.
        takeover = "" if epoch is not None else "lease_owner = NULL, lease_expiry = NULL, "
        params: list[Any] = [0 if epoch is not None else 1, utc_now(), run_id]
        fence = ""
        if epoch is not None:
            fence, params = " AND lease_epoch = ?", [*params, epoch]
        returning = f"{fence} RETURNING {rows.RUN_COLUMNS}"
        resumable = rows.BEGIN.format(takeover=takeover, where=rows.RESUMABLE) + returning
        not_awaiting = rows.BEGIN.format(takeover=takeover, where=rows.NOT_AWAITING) + returning

        def begin(cur: Cursor) -> StoredRun:
            # The common case is decided by the row alone: an UPDATE re-checks such a WHERE exactly against a row
            # that changed while it waited for it.
            found = cur.execute(resumable, params).fetchall()
            if found:
                return rows.run_record(found[0], self.location)
            # A run awaiting approval (or not resumable at all). Lock first. Without it, an UPDATE that waited on a
            # concurrent create_approval(pause_epoch=...) would re-check its WHERE against the new row
            # (awaiting_approval) but run EXISTS on its old snapshot (no approval yet), and resume a paused run.
            # After the lock, the UPDATE's snapshot has the approval.
            self._exists(cur, run_id, "NO KEY UPDATE")
            found = cur.execute(not_awaiting, params).fetchall()
            if found:
                return rows.run_record(found[0], self.location)
            run = cur.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if run is not None and run[0] in rows.TERMINAL:
                raise RunNotResumable(run_id, run[0])
            pending = [r[0] for r in cur.execute(
                "SELECT id FROM approvals WHERE run_id = ? AND status = 'pending' ORDER BY created_at, id",
                (run_id,)).fetchall()]
            if run is not None and run[0] == "awaiting_approval" and pending:
                raise RunAwaitingApproval(run_id, pending)
            raise self._refused(cur, run_id, epoch)

        return self._write("begin_attempt", begin)

    def bump_epoch(self, run_id: str, expected: int | None = None) -> int:
        def bump(cur: Cursor) -> int:
            # Locked read: two bumps without ``expected`` both succeed (one after the other) instead of the second
            # failing its compare-and-set against a value read before the first committed.
            row = cur.execute(f"SELECT lease_epoch FROM runs WHERE id = ?{self._for('NO KEY UPDATE')}",
                              (run_id,)).fetchone()
            if row is None:
                raise RunNotFound(run_id, self.location)
            base = row[0] if expected is None else expected
            changed = cur.execute(
                "UPDATE runs SET lease_epoch = ?, updated_at = ? WHERE id = ? AND lease_epoch = ?",
                (base + 1, utc_now(), run_id, base),
            ).rowcount
            if not changed:
                raise LeaseLost(run_id, base, row[0])
            return base + 1

        return self._write("bump_epoch", bump)

    def delete_run(self, run_id: str) -> bool:
        def delete(cur: Cursor) -> bool:
            # FOR UPDATE (not NO KEY UPDATE) also waits out inserts that reference the run (their foreign-key check
            # takes KEY SHARE), so no checkpoint or approval can land between the child deletes and the run's.
            self._exists(cur, run_id, "UPDATE")
            for table in ("checkpoints", "approvals"):  # the history is a view of checkpoints
                cur.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            return bool(cur.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount)

        return self._write("delete_run", delete)

    # --- steps ---

    def save_step(self, run_id: str, step: int, name: str, output: Any, epoch: int) -> StepRecord:
        text = encode(output, run_id=run_id, step=step)
        now = utc_now()
        # The fence is the insert itself: it copies the step in only from a runs row still at ``epoch``, reading that
        # row without rewriting it (one page fewer per step than a fence-by-UPDATE). Where rows are locked, it locks
        # that row FOR NO KEY UPDATE rather than FOR SHARE: either makes a concurrent bump_epoch wait until this step
        # commits, and makes this insert, if it waited on a bump, re-check the epoch on the bumped row and insert
        # nothing. NO KEY UPDATE also serialises two saves of one run (SQLite's write lock does), and lets the
        # consecutive_failures reset below update the row without a lock upgrade (two FOR SHARE holders upgrading
        # deadlock). It does not block other runs, nor the foreign-key checks (KEY SHARE) of inserts that
        # reference this run.
        insert = rows.SAVE_STEP.format(lock=self._for("NO KEY UPDATE"))

        def save(cur: Cursor) -> StepRecord:
            if not cur.execute(insert, (run_id, step, name, text, now, epoch, self.history_limit, run_id,
                                        epoch)).rowcount:
                existing = cur.execute(f"SELECT {rows.STEP_COLUMNS} FROM checkpoints WHERE run_id = ? AND step = ?",
                                       (run_id, step)).fetchone()
                current = cur.execute("SELECT lease_epoch FROM runs WHERE id = ?", (run_id,)).fetchone()
                if current is None or current[0] != epoch or existing is None:
                    raise self._refused(cur, run_id, epoch)
                return rows.step_record(existing, self.location)  # recorded already: the first record stands
            # Progress resets the failure count; the WHERE skips the row write when it is 0 already.
            cur.execute(rows.RESET_FAILURES, (now, run_id))
            return StepRecord(run_id, step, name, decode(text, run_id=run_id, step=step, column="output",
                                                         location=self.location), now, epoch)

        return self._write("save_step", save)

    def load_steps(self, run_id: str) -> dict[int, StepRecord]:
        found = self._read(f"SELECT {rows.STEP_COLUMNS} FROM checkpoints WHERE run_id = ? ORDER BY step", (run_id,))
        return {row[1]: rows.step_record(row, self.location) for row in found}

    def history(self, run_id: str, limit: int = DEFAULT_HISTORY_LIMIT) -> list[StepRecord]:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, not {limit}")
        # min(): after the limit was lowered, entries past it stay in the view until the run is deleted.
        found = self._read(
            f"SELECT {rows.STEP_COLUMNS} FROM checkpoint_history WHERE run_id = ? ORDER BY seq DESC LIMIT ?",
            (run_id, min(limit, self.history_limit)),
        )
        return [rows.step_record(row, self.location) for row in found]

    def fork(self, run_id: str, from_step: int, new_id: str, note: str | None = None) -> StoredRun:
        now = utc_now()

        def fork(cur: Cursor) -> StoredRun:
            # FOR SHARE on the source: its steps cannot change (save_step's lock conflicts) while they are listed
            # and copied; concurrent forks share it, and the second insert of new_id finds the first's key.
            self._get(cur, run_id, lock=self._for("SHARE"))  # RunNotFound first
            kept = [r[0] for r in cur.execute("SELECT step FROM checkpoints WHERE run_id = ? ORDER BY step",
                                              (run_id,)).fetchall()]
            if from_step not in kept and from_step != (kept[-1] + 1 if kept else 0):
                raise CheckpointNotFound(run_id, from_step, kept)
            inserted = cur.execute(
                "INSERT INTO runs (id, agent, kind, status, input, attempts, consecutive_failures, lease_epoch, "
                "healed_from, note, created_at, updated_at) "
                "SELECT ?, agent, kind, 'interrupted', input, 0, 0, 0, id, ?, ?, ? FROM runs WHERE id = ? "
                "ON CONFLICT (id) DO NOTHING",
                (new_id, note, now, now, run_id),
            ).rowcount
            if not inserted:
                raise RunExists(new_id, self.location)
            copied = cur.execute(
                "SELECT step, name, output, saved_at, epoch FROM checkpoints WHERE run_id = ? AND step < ? "
                "ORDER BY step", (run_id, from_step),
            ).fetchall()
            if copied:  # the copies are the fork's first saves, so its history starts with them
                cur.executemany(rows.COPY_STEP, [(new_id, *row, self.history_limit) for row in copied])
            return self._get(cur, new_id)

        return self._write("fork", fork)

    # --- the recover loop: claims ---

    def list_due(self, *, now: datetime, orphan_before: datetime, limit: int = 1000) -> list[str]:
        at = format_utc(now)
        found = self._read(f"SELECT id FROM runs WHERE {rows.CLAIMABLE} AND {rows.DUE} ORDER BY created_at, id "
                           "LIMIT ?", (*rows.claimable(at, format_utc(orphan_before)), at, limit))
        return [row[0] for row in found]

    def claim_run(
        self, run_id: str, *, owner: str, lease_seconds: float, now: datetime, orphan_before: datetime,
        due_only: bool = True,
    ) -> StoredRun | None:
        at = format_utc(now)
        where = f"id = ? AND {rows.CLAIMABLE}"
        params = [owner, format_utc(now + timedelta(seconds=lease_seconds)), at, rows.CRASHED, run_id,
                  *rows.claimable(at, format_utc(orphan_before))]
        if due_only:
            where, params = f"{where} AND {rows.DUE}", [*params, at]
        # One conditional write: the WHERE is checked and the row changed with nothing in between (SQLite: the write
        # lock; Postgres: the row lock, re-read current). SKIP LOCKED: a replica whose run another replica is
        # claiming this instant moves on at once instead of queueing on the row lock.
        sql = (f"{rows.CLAIM}id = (SELECT id FROM runs WHERE {where}{self._for('UPDATE SKIP LOCKED')}) "
               f"RETURNING {rows.RUN_COLUMNS}")

        def claim(cur: Cursor) -> StoredRun | None:
            found = cur.execute(sql, params).fetchall()
            return rows.run_record(found[0], self.location) if found else None  # one that does not decode: rollback

        return self._write("claim_run", claim)

    def claim_due(
        self, *, owner: str, lease_seconds: float, now: datetime, orphan_before: datetime, limit: int,
    ) -> list[StoredRun | CheckpointCorrupt]:
        at, expiry = format_utc(now), format_utc(now + timedelta(seconds=lease_seconds))
        # One compare-and-set for the batch: SQLite's write lock holds every other writer off from the read to the
        # write; on Postgres the rows read are locked (SKIP LOCKED: rows another replica is claiming this instant are
        # passed over, not waited for) and re-read current, so the claim rule holds for the versions updated.
        select = f"{rows.CLAIM_DUE_SELECT}{self._for('UPDATE SKIP LOCKED')}"

        def claim(cur: Cursor) -> list[tuple[Any, ...]]:
            found = cur.execute(select, (*rows.claimable(at, format_utc(orphan_before)), at, limit)).fetchall()
            if found:
                cur.execute(f"{rows.CLAIM}id IN ({', '.join('?' * len(found))})",
                            (owner, expiry, at, rows.CRASHED, *[row[0] for row in found]))
            return found

        return [rows.claimed(row, owner, expiry, at, self.location) for row in self._write("claim_due", claim)]

    # --- the recover loop: the outage breaker ---

    def get_outage(self) -> OutageState:
        found = self._read(rows.OUTAGE_ROW)
        return self._outage(found[0]) if found else CLOSED_OUTAGE

    def record_outcome(
        self, *, provider_failure: bool, now: datetime, threshold: int, first_probe_at: datetime,
        error: dict[str, Any] | None = None,
    ) -> tuple[OutageState, str | None]:
        at = format_utc(now)
        if not provider_failure:
            # The common case, a success with the breaker closed and no failures counted, needs no write (nor the
            # breaker row's lock, which every replica would queue on once per run): a failure that lands after this
            # read is simply ordered after this success.
            current = self.get_outage()
            if not current.paused and current.failures == 0:
                return current, None

        def record(cur: Cursor) -> tuple[OutageState, str | None]:
            cur.execute("INSERT INTO recover_outage (id, failures, probes, updated_at) VALUES ('provider', 0, 0, ?) "
                        "ON CONFLICT (id) DO NOTHING", (at,))  # a row deleted by hand comes back closed
            # Read, then decide: locked (FOR UPDATE), so two replicas counting the failure that reaches the
            # threshold open the breaker once, and only one of them reports "opened".
            before = self._outage(cur.execute(rows.OUTAGE_ROW + self._for("UPDATE")).fetchone())
            self._hit("record_outcome:read")
            change: str | None = None
            if provider_failure and not before.paused and before.failures + 1 >= threshold:
                # Each column once: Postgres refuses two assignments to one column (SQLite keeps the last).
                cur.execute(
                    "UPDATE recover_outage SET failures = failures + 1, paused_since = ?, probes = 0, "
                    "next_probe_at = ?, probe_owner = NULL, probe_run = NULL, probe_expiry = NULL, last_error = ?, "
                    "updated_at = ? WHERE id = 'provider'",
                    (at, format_utc(first_probe_at), None if error is None else encode(error, run_id="provider"), at),
                )
                change = "opened"
            elif provider_failure:
                cur.execute("UPDATE recover_outage SET failures = failures + 1, updated_at = ? WHERE id = 'provider'",
                            (at,))
            elif before.failures or before.paused:
                cur.execute(f"UPDATE recover_outage SET failures = 0, {rows.CLEAR_PAUSE}, last_error = NULL, "
                            "updated_at = ? WHERE id = 'provider'", (at,))
                change = "closed" if before.paused else None
            else:
                return before, None  # closed with no failures: nothing to write
            return self._outage(cur.execute(rows.OUTAGE_ROW).fetchone()), change

        return self._write("record_outcome", record)

    # reserve, renew and release are one conditional UPDATE whose WHERE reads only the row it changes: a second
    # racer waits on the first's row lock (or SQLite's write lock), re-checks the WHERE against the committed row
    # and finds the slot taken, so exactly one wins (STYLE §9).

    def _changed(self, point: str, sql: str, params: Sequence[Any]) -> bool:
        return self._write(point, lambda cur: bool(cur.execute(sql, params).rowcount))

    def reserve_probe(self, *, owner: str, now: datetime, expiry: datetime) -> bool:
        at = format_utc(now)
        return self._changed(
            "reserve_probe",
            "UPDATE recover_outage SET probe_owner = ?, probe_run = NULL, probe_expiry = ?, updated_at = ? "
            "WHERE id = 'provider' AND paused_since IS NOT NULL AND (next_probe_at IS NULL OR next_probe_at <= ?) "
            "AND (probe_owner IS NULL OR probe_expiry <= ?)",
            (owner, format_utc(expiry), at, at, at),
        )

    def renew_probe(self, *, owner: str, expiry: datetime, run_id: str | None = None) -> bool:
        return self._changed(
            "renew_probe",
            "UPDATE recover_outage SET probe_expiry = ?, probe_run = COALESCE(?, probe_run) "
            "WHERE id = 'provider' AND probe_owner = ?",
            (format_utc(expiry), run_id, owner),
        )

    def release_probe(self, *, owner: str, now: datetime, failed: bool, next_probe_at: datetime | None) -> bool:
        sets, params = "probe_owner = NULL, probe_run = NULL, probe_expiry = NULL, updated_at = ?", [format_utc(now)]
        if failed:
            sets += ", probes = probes + 1, next_probe_at = COALESCE(?, next_probe_at)"
            params.append(None if next_probe_at is None else format_utc(next_probe_at))
        return self._changed("release_probe", f"UPDATE recover_outage SET {sets} WHERE id = 'provider' AND "
                             "probe_owner = ?", (*params, owner))

    # --- approvals ---

    def create_approval(
        self, run_id: str, *, tool_call_id: str | None, tool_name: str | None, args: Any, kind: str = "tool",
        approval_id: str | None = None, pause_epoch: int | None = None,
    ) -> Approval:
        rows.check_choice("kind", kind, schema.APPROVAL_KINDS)
        approval_id = approval_id or uuid.uuid4().hex
        text = encode(args, run_id=run_id)
        now = utc_now()

        def create(cur: Cursor) -> Approval:
            if pause_epoch is not None:
                paused = cur.execute(
                    "UPDATE runs SET status = 'awaiting_approval', updated_at = ? WHERE id = ? AND lease_epoch = ?",
                    (now, run_id, pause_epoch),
                ).rowcount
                if not paused:
                    raise self._refused(cur, run_id, pause_epoch)
            elif not self._exists(cur, run_id, "KEY SHARE"):
                # KEY SHARE: the run cannot be deleted before this commits, so a racing delete_run gives
                # RunNotFound here (or waits for this approval and deletes it too), never a foreign-key error.
                raise RunNotFound(run_id, self.location)
            inserted = cur.execute(
                f"INSERT INTO approvals ({rows.APPROVAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, NULL) "
                "ON CONFLICT (id) DO NOTHING",
                (approval_id, run_id, tool_call_id, tool_name, text, kind, now),
            ).rowcount
            if not inserted:
                raise ApprovalExists(approval_id, self.location)
            return self._approval(cur, approval_id)

        return self._write("create_approval", create)

    def get_approval(self, approval_id: str) -> Approval | None:
        found = self._read(f"SELECT {rows.APPROVAL_COLUMNS} FROM approvals WHERE id = ?", (approval_id,))
        return rows.approval_record(found[0], self.location) if found else None

    def list_approvals(self, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        where, params = ["1 = 1"], []
        for column, value in (("run_id", run_id), ("status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {rows.APPROVAL_COLUMNS} FROM approvals WHERE {' AND '.join(where)} ORDER BY created_at, id"
        return [rows.approval_record(row, self.location) for row in self._read(sql, params)]

    def resolve_approval(self, approval_id: str, approved: bool) -> Approval:
        def resolve(cur: Cursor) -> Approval:
            # Take-once: a second resolver waits for the first (write or row lock), re-checks status = 'pending'
            # against the committed row, and changes nothing.
            now = utc_now()
            taken = cur.execute(
                "UPDATE approvals SET status = ?, resolved_at = ? WHERE id = ? AND status = 'pending'",
                ("approved" if approved else "denied", now, approval_id),
            ).rowcount
            if not taken:
                raise ApprovalNotFound(approval_id, self.location)
            # The decision restarts the paused run's grace (rows.CLAIMABLE): its resumer goes first, the loop after.
            cur.execute("UPDATE runs SET updated_at = ? WHERE id = (SELECT run_id FROM approvals WHERE id = ?) "
                        "AND status = 'awaiting_approval'", (now, approval_id))
            return self._approval(cur, approval_id)

        return self._write("resolve_approval", resolve)

    # --- sessions ---

    def get_session(self, session_id: str) -> Session | None:
        found = self._read(f"SELECT {rows.SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        return rows.session_record(found[0], self.location) if found else None

    def save_session(self, session: Session) -> Session:
        text = encode(session.transcript, run_id=session.id)
        now = utc_now()

        def save(cur: Cursor) -> None:
            # Optimistic: the version read is the condition (an insert of version 1 when it was 0).
            if session.version == 0:
                written = cur.execute(
                    f"INSERT INTO sessions ({rows.SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, 1, ?) "
                    "ON CONFLICT (id) DO NOTHING",
                    (session.id, session.agent, text, session.turns, session.pending_turn, now),
                ).rowcount
            else:
                written = cur.execute(
                    "UPDATE sessions SET agent = ?, transcript = ?, turns = ?, pending_turn = ?, "
                    "version = version + 1, updated_at = ? WHERE id = ? AND version = ?",
                    (session.agent, text, session.turns, session.pending_turn, now, session.id, session.version),
                ).rowcount
            if not written:
                raise SessionConflict(session.id, session.version, self.location)

        self._write("save_session", save)
        return Session(session.id, session.agent, decode(text, run_id=session.id, step=None, column="transcript",
                                                         location=self.location, owner="session"),
                       session.turns, session.pending_turn, session.version + 1, now)
