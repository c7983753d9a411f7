"""The Postgres run store: one database (or one schema of it) shared by processes on several machines.

The same tables as the SQLite store, from the same migrations (``schema.py``), and the same behaviour, method for
method (``store.RunStore``); tests/recover runs one suite against both. What differs is how each transaction is
made safe against the others. SQLite takes one write lock per file (``BEGIN IMMEDIATE``), so its transactions run
one at a time. Postgres runs them at once under READ COMMITTED, where each statement sees what committed before
it started, and a row lock is what orders two writers of one run. So every write that reads a run before it
writes starts by locking that run's row, and then reads with a statement that starts after the lock was granted,
so it sees every commit before it. One-statement writes (``UPDATE ... WHERE id = %s AND lease_epoch = %s``) need
no extra lock: an UPDATE that waited on a row re-checks its WHERE against the row as committed (Postgres's
EvalPlanQual), so a fenced write that lost the race to ``bump_epoch`` changes nothing.

Columns: every TEXT column is declared ``COLLATE "C"`` here (``_pg_ddl``), so ids and timestamps sort and compare
bytewise as in SQLite, whatever the database's default collation (``en_US.UTF-8`` would sort ``r1.heal`` against
``r1-x`` differently, and ``ORDER BY created_at, id`` with it).

Concurrency inside a process: one connection per store object behind a lock; each process opens its own.
Connection, retries and error translation live in ``_pg.py``.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

import psycopg

from lousho.recover import schema
from lousho.recover._codec import decode, encode, utc_now
from lousho.recover._pg import PgConnection, redact
from lousho.recover._pg_loop import PgLoopMethods
from lousho.recover._rows import (
    APPROVAL_COLUMNS,
    COPY_STEP,
    RESET_FAILURES,
    RUN_COLUMNS,
    SAVE_STEP,
    SESSION_COLUMNS,
    STEP_COLUMNS,
    TERMINAL,
    approval_record,
    check_choice,
    column_value,
    pg,
    run_record,
    session_record,
    step_record,
)
from lousho.recover.errors import (
    ApprovalExists,
    ApprovalNotFound,
    CheckpointNotFound,
    LeaseLost,
    RunAwaitingApproval,
    RunExists,
    RunNotFound,
    RunNotResumable,
    SchemaTooNew,
    SessionConflict,
    StoreMissing,
)
from lousho.recover.store import UPDATABLE, Approval, RunRecord, Session, StepRecord, check_history_limit

T = TypeVar("T")
Cursor = psycopg.Cursor[Any]

# As the SQLite store's busy timeout: a lock held longer than this (a stuck or leaked transaction) is StoreBusy.
BUSY_TIMEOUT_S = 10.0
# pg_advisory_xact_lock key for migrations (any constant; "lousho" in ASCII): two processes opening a new database
# at once would otherwise race CREATE TABLE (Postgres has no database-wide write lock like SQLite's).
_MIGRATION_LOCK = 0x6C6F7573686F
# The shared insert with the fence's row locked (see save_step).
_SAVE_STEP = pg(SAVE_STEP.replace(" ON CONFLICT", " FOR NO KEY UPDATE ON CONFLICT"))


def _pg_ddl(statement: str) -> str:
    """A migration statement as Postgres runs it: TEXT columns collate bytewise, as in SQLite (module docstring)."""
    return re.sub(r"\bTEXT\b", 'TEXT COLLATE "C"', statement)


class PostgresStore(PgLoopMethods):
    """``RunStore`` on a Postgres database (see ``store.RunStore`` for the contract of each method; the recover
    loop's claims and outage breaker are in ``_pg_loop.py``)."""

    def __init__(
        self,
        url: str,
        *,
        history_limit: int = 50,
        create: bool = True,
        fault: Callable[[str], None] | None = None,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        check_history_limit(history_limit)
        self.location = redact(url)
        self.history_limit = history_limit
        self._fault = fault
        self._lock = threading.RLock()
        self._db = PgConnection(url, self.location, busy_timeout_s)
        try:
            self._migrate(create)
        except BaseException:
            self._db.close()
            raise

    # --- transactions ---

    def _write(self, point: str, body: Callable[[Cursor], T]) -> T:
        """``body`` as one transaction (re-run whole on a transient error); fault points ``<point>:before_commit``
        (inside the transaction) and ``<point>:after_commit``."""
        with self._lock:
            result = self._db.run(body, write=True, before_commit=lambda: self._hit(f"{point}:before_commit"))
        self._hit(f"{point}:after_commit")
        return result

    def _hit(self, point: str) -> None:
        if self._fault is not None:
            self._fault(point)

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.run(lambda cur: cur.execute(sql, params).fetchall(), write=False)

    def _migrate(self, create: bool) -> None:
        def migrate(cur: Cursor) -> None:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            if cur.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None:
                if not create:
                    raise StoreMissing(self.location)
                cur.execute(_pg_ddl(schema.VERSION_TABLE))
            current = cur.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
            if current > schema.LATEST:
                raise SchemaTooNew(self.location, current, schema.LATEST)
            for version in range(current, schema.LATEST):
                for statement in schema.MIGRATIONS[version]:
                    cur.execute(_pg_ddl(statement))
                cur.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (%s, %s)",
                            (version + 1, utc_now()))

        self._write("migrate", migrate)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- rows to records ---

    def _get(self, cur: Cursor, run_id: str, lock: str = "") -> RunRecord:
        row = cur.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = %s {lock}", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(run_id, self.location)
        return run_record(row, self.location)

    def _refused(self, cur: Cursor, run_id: str, epoch: int | None) -> BaseException:
        """Why a fenced or conditional write on ``run_id`` changed no row (unfenced writes, ``epoch`` None, only
        change no row when the run is missing). A new statement: it reads the run as committed now."""
        row = cur.execute("SELECT lease_epoch FROM runs WHERE id = %s", (run_id,)).fetchone()
        if row is None:
            return RunNotFound(run_id, self.location)
        return LeaseLost(run_id, -1 if epoch is None else epoch, row[0])

    # --- runs ---

    def create_run(
        self, run_id: str, *, agent: str, kind: str, input: Any, status: str = "running", attempts: int = 0,
    ) -> RunRecord:
        check_choice("kind", kind, schema.RUN_KINDS)
        check_choice("status", status, schema.RUN_STATUSES)
        text = encode(input, run_id=run_id)
        now = utc_now()

        def create(cur: Cursor) -> RunRecord:
            # Two creators of one id: the second waits on the first's uncommitted key, then does nothing.
            cur.execute(
                "INSERT INTO runs (id, agent, kind, status, input, attempts, created_at, updated_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                (run_id, agent, kind, status, text, attempts, now, now),
            )
            if not cur.rowcount:
                raise RunExists(run_id, self.location)
            return self._get(cur, run_id)

        return self._write("create_run", create)

    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._read(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = %s", (run_id,))
        return run_record(rows[0], self.location) if rows else None

    def list_runs(self, statuses: Iterable[str] | None = None, agent: str | None = None) -> list[RunRecord]:
        where, params = ["1 = 1"], []
        if statuses is not None:
            wanted = list(statuses)
            where.append(f"status IN ({', '.join(['%s'] * len(wanted))})" if wanted else "1 = 0")
            params += wanted
        if agent is not None:
            where.append("agent = %s")
            params.append(agent)
        sql = f"SELECT {RUN_COLUMNS} FROM runs WHERE {' AND '.join(where)} ORDER BY created_at, id"
        return [run_record(row, self.location) for row in self._read(sql, tuple(params))]

    def _fenced_update(self, point: str, run_id: str, sql: str, params: list[Any], epoch: int | None, *,
                       idempotent: bool = False) -> RunRecord:
        """One conditional UPDATE of the run (fenced by ``epoch`` when given): the fence is its WHERE.

        ``idempotent``: the UPDATE sets values, not increments, so applying it twice leaves what applying it once
        does. Then it runs as its own transaction (one round trip, not a BEGIN, the UPDATE and a COMMIT), retried
        whole on a lost connection as a read is, and its fault point ``<point>:before_commit`` comes just before
        it (a single statement has no moment between its write and its commit). Should the retry find the epoch
        moved on after a first try that did commit, it raises ``LeaseLost`` for a write that landed: the caller
        stops, as it must anyway once another holder took the run.
        """
        if epoch is not None:
            sql, params = sql + " AND lease_epoch = %s", [*params, epoch]

        def update(cur: Cursor) -> RunRecord:
            row = cur.execute(f"{sql} RETURNING {RUN_COLUMNS}", params).fetchone()  # the write and its read, at once
            if row is None:
                raise self._refused(cur, run_id, epoch)
            return run_record(row, self.location)

        if not idempotent:
            return self._write(point, update)
        with self._lock:
            self._hit(f"{point}:before_commit")
            result = self._db.run(update, write=False)
        self._hit(f"{point}:after_commit")
        return result

    def update_run(self, run_id: str, *, epoch: int | None = None, **fields: Any) -> RunRecord:
        unknown = sorted(set(fields) - UPDATABLE)
        if unknown:
            raise TypeError(f"update_run cannot set {', '.join(unknown)}; it sets {', '.join(sorted(UPDATABLE))}")
        columns = list(fields)  # names from UPDATABLE only, so safe to put in the SQL
        values = [column_value(run_id, name, fields[name]) for name in columns]
        sets = ", ".join(f"{name} = %s" for name in [*columns, "updated_at"])
        return self._fenced_update("update_run", run_id, f"UPDATE runs SET {sets} WHERE id = %s",
                                   [*values, utc_now(), run_id], epoch, idempotent=True)

    def record_failure(
        self, run_id: str, error: dict[str, Any], *, status: str | None = None,
        next_attempt_at: datetime | None = None, count_attempt: bool = True, epoch: int | None = None,
    ) -> RunRecord:
        if status is not None:
            check_choice("status", status, schema.RUN_STATUSES)
        stored = {"message": "", "code": None, "category": None, "retryable": True, **error}
        sql = (
            "UPDATE runs SET attempts = attempts + %s, consecutive_failures = consecutive_failures + 1, "
            "last_error = %s, status = COALESCE(%s, status), next_attempt_at = COALESCE(%s, next_attempt_at), "
            "updated_at = %s WHERE id = %s"
        )
        params = [int(count_attempt), encode(stored, run_id=run_id), status,
                  column_value(run_id, "next_attempt_at", next_attempt_at), utc_now(), run_id]
        return self._fenced_update("record_failure", run_id, sql, params, epoch)

    def begin_attempt(self, run_id: str, *, epoch: int | None = None) -> RunRecord:
        # A takeover (no epoch) also drops the old lease: its holder is fenced out, and an expired lease left
        # behind would make the run claimable by a recover loop at once.
        takeover = "" if epoch is not None else "lease_owner = NULL, lease_expiry = NULL, "
        sql = (
            f"UPDATE runs SET attempts = attempts + 1, status = 'running', lease_epoch = lease_epoch + %s, {takeover}"
            "updated_at = %s WHERE id = %s AND status NOT IN ('finished', 'stopped') AND NOT ("
            "status = 'awaiting_approval' AND EXISTS ("
            "SELECT 1 FROM approvals WHERE approvals.run_id = runs.id AND approvals.status = 'pending'))"
        )
        params: list[Any] = [0 if epoch is not None else 1, utc_now(), run_id]
        fence = ""
        if epoch is not None:
            fence, params = " AND lease_epoch = %s", [*params, epoch]
        # The common case (an interrupted or running run, as every run the recover loop claims is) decided by the
        # row alone: the UPDATE re-checks such a WHERE exactly against a row that changed while it waited for it.
        resumable = (f"UPDATE runs SET attempts = attempts + 1, status = 'running', lease_epoch = lease_epoch + %s, "
                     f"{takeover}updated_at = %s WHERE id = %s "
                     f"AND status NOT IN ('finished', 'stopped', 'awaiting_approval'){fence} RETURNING {RUN_COLUMNS}")

        def begin(cur: Cursor) -> RunRecord:
            row = cur.execute(resumable, params).fetchone()
            if row is not None:
                return run_record(row, self.location)
            # A run awaiting approval (or not resumable at all). Lock first. Without it, an UPDATE that waited on a
            # concurrent create_approval(pause_epoch=...) would re-check its WHERE against the new row
            # (awaiting_approval) but run EXISTS on its old snapshot (no approval yet), and resume a paused run.
            # After the lock, the UPDATE's snapshot has the approval.
            cur.execute("SELECT 1 FROM runs WHERE id = %s FOR NO KEY UPDATE", (run_id,))
            row = cur.execute(f"{sql}{fence} RETURNING {RUN_COLUMNS}", params).fetchone()
            if row is not None:
                return run_record(row, self.location)
            run = cur.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()
            if run is not None and run[0] in TERMINAL:
                raise RunNotResumable(run_id, run[0])
            pending = [r[0] for r in cur.execute(
                "SELECT id FROM approvals WHERE run_id = %s AND status = 'pending' ORDER BY created_at, id",
                (run_id,))]
            if run is not None and run[0] == "awaiting_approval" and pending:
                raise RunAwaitingApproval(run_id, pending)
            raise self._refused(cur, run_id, epoch)

        return self._write("begin_attempt", begin)

    def bump_epoch(self, run_id: str, expected: int | None = None) -> int:
        def bump(cur: Cursor) -> int:
            # Locked read: two bumps without ``expected`` both succeed (one after the other), as in SQLite, instead
            # of the second failing its compare-and-set against a value read before the first committed.
            row = cur.execute("SELECT lease_epoch FROM runs WHERE id = %s FOR NO KEY UPDATE", (run_id,)).fetchone()
            if row is None:
                raise RunNotFound(run_id, self.location)
            base = row[0] if expected is None else expected
            changed = cur.execute(
                "UPDATE runs SET lease_epoch = %s, updated_at = %s WHERE id = %s AND lease_epoch = %s",
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
            cur.execute("SELECT 1 FROM runs WHERE id = %s FOR UPDATE", (run_id,))
            for table in ("checkpoints", "approvals"):  # the history is a view of checkpoints
                cur.execute(f"DELETE FROM {table} WHERE run_id = %s", (run_id,))
            return bool(cur.execute("DELETE FROM runs WHERE id = %s", (run_id,)).rowcount)

        return self._write("delete_run", delete)

    # --- steps ---

    def save_step(self, run_id: str, step: int, name: str, output: Any, epoch: int) -> StepRecord:
        text = encode(output, run_id=run_id, step=step)
        now = utc_now()

        def save(cur: Cursor) -> StepRecord:
            # The fence is the insert itself: it copies the step in only from a runs row still at ``epoch``, and
            # locks that row. FOR NO KEY UPDATE rather than FOR SHARE: either makes a concurrent bump_epoch wait
            # until this step commits, and makes this insert, if it waited on a bump, re-check the epoch on the
            # bumped row and insert nothing. NO KEY UPDATE also serialises two saves of one run (SQLite's write lock
            # does), and lets the consecutive_failures reset below update the row without a lock upgrade (two FOR
            # SHARE holders upgrading deadlock). It does not block
            # other runs, nor the foreign-key checks (KEY SHARE) of inserts that reference this run.
            cur.execute(_SAVE_STEP, (run_id, step, name, text, now, epoch, self.history_limit, run_id, epoch))
            if not cur.rowcount:
                existing = cur.execute(f"SELECT {STEP_COLUMNS} FROM checkpoints WHERE run_id = %s AND step = %s",
                                       (run_id, step)).fetchone()
                current = cur.execute("SELECT lease_epoch FROM runs WHERE id = %s", (run_id,)).fetchone()
                if current is None or current[0] != epoch or existing is None:
                    raise self._refused(cur, run_id, epoch)
                return step_record(existing, self.location)  # recorded already: the first record stands
            # Progress resets the failure count; the WHERE skips the row write when it is 0 already.
            cur.execute(pg(RESET_FAILURES), (now, run_id))
            return StepRecord(run_id, step, name, decode(text, run_id=run_id, step=step, column="output",
                                                         location=self.location), now, epoch)

        return self._write("save_step", save)

    def load_steps(self, run_id: str) -> dict[int, StepRecord]:
        rows = self._read(f"SELECT {STEP_COLUMNS} FROM checkpoints WHERE run_id = %s ORDER BY step", (run_id,))
        return {row[1]: step_record(row, self.location) for row in rows}

    def history(self, run_id: str, limit: int = 50) -> list[StepRecord]:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, not {limit}")
        # min(): after the limit was lowered, slots past it still hold older entries until the run is deleted.
        rows = self._read(
            f"SELECT {STEP_COLUMNS} FROM checkpoint_history WHERE run_id = %s ORDER BY seq DESC LIMIT %s",
            (run_id, min(limit, self.history_limit)),
        )
        return [step_record(row, self.location) for row in rows]

    def fork(self, run_id: str, from_step: int, new_id: str, note: str | None = None) -> RunRecord:
        now = utc_now()

        def fork(cur: Cursor) -> RunRecord:
            # FOR SHARE on the source: its steps cannot change (save_step's lock conflicts) while they are listed
            # and copied; concurrent forks share it, and the second insert of new_id finds the first's key.
            self._get(cur, run_id, lock="FOR SHARE")  # RunNotFound first
            kept = [r[0] for r in cur.execute("SELECT step FROM checkpoints WHERE run_id = %s ORDER BY step",
                                              (run_id,))]
            if from_step not in kept and from_step != (kept[-1] + 1 if kept else 0):
                raise CheckpointNotFound(run_id, from_step, kept)
            cur.execute(
                "INSERT INTO runs (id, agent, kind, status, input, attempts, consecutive_failures, lease_epoch, "
                "healed_from, note, created_at, updated_at) "
                "SELECT %s, agent, kind, 'interrupted', input, 0, 0, 0, id, %s, %s, %s FROM runs WHERE id = %s "
                "ON CONFLICT (id) DO NOTHING",
                (new_id, note, now, now, run_id),
            )
            if not cur.rowcount:
                raise RunExists(new_id, self.location)
            copied = cur.execute(
                "SELECT step, name, output, saved_at, epoch FROM checkpoints WHERE run_id = %s AND step < %s "
                "ORDER BY step", (run_id, from_step),
            ).fetchall()
            if copied:  # the copies are the fork's first saves, so its history starts with them
                cur.executemany(pg(COPY_STEP), [(new_id, *row, self.history_limit) for row in copied])
            return self._get(cur, new_id)

        return self._write("fork", fork)

    # --- approvals ---

    def create_approval(
        self, run_id: str, *, tool_call_id: str | None, tool_name: str | None, args: Any, kind: str = "tool",
        approval_id: str | None = None, pause_epoch: int | None = None,
    ) -> Approval:
        check_choice("kind", kind, schema.APPROVAL_KINDS)
        approval_id = approval_id or uuid.uuid4().hex
        text = encode(args, run_id=run_id)
        now = utc_now()

        def create(cur: Cursor) -> Approval:
            if pause_epoch is not None:
                paused = cur.execute(
                    "UPDATE runs SET status = 'awaiting_approval', updated_at = %s WHERE id = %s AND lease_epoch = %s",
                    (now, run_id, pause_epoch),
                ).rowcount
                if not paused:
                    raise self._refused(cur, run_id, pause_epoch)
            elif cur.execute("SELECT 1 FROM runs WHERE id = %s FOR KEY SHARE", (run_id,)).fetchone() is None:
                # KEY SHARE: the run cannot be deleted before this commits, so a racing delete_run gives
                # RunNotFound here (or waits for this approval and deletes it too), never a foreign-key error.
                raise RunNotFound(run_id, self.location)
            cur.execute(
                f"INSERT INTO approvals ({APPROVAL_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, 'pending', %s, NULL) "
                "ON CONFLICT (id) DO NOTHING",
                (approval_id, run_id, tool_call_id, tool_name, text, kind, now),
            )
            if not cur.rowcount:
                raise ApprovalExists(approval_id, self.location)
            return self._approval(cur, approval_id)

        return self._write("create_approval", create)

    def _approval(self, cur: Cursor, approval_id: str) -> Approval:
        row = cur.execute(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = %s", (approval_id,)).fetchone()
        return approval_record(row, self.location)

    def get_approval(self, approval_id: str) -> Approval | None:
        rows = self._read(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = %s", (approval_id,))
        return approval_record(rows[0], self.location) if rows else None

    def list_approvals(self, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        where, params = ["1 = 1"], []
        for column, value in (("run_id", run_id), ("status", status)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        sql = f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE {' AND '.join(where)} ORDER BY created_at, id"
        return [approval_record(row, self.location) for row in self._read(sql, tuple(params))]

    def resolve_approval(self, approval_id: str, approved: bool) -> Approval:
        def resolve(cur: Cursor) -> Approval:
            # Take-once: a second resolver waits on the first's row lock, re-checks status = 'pending' against the
            # committed row, and changes nothing.
            taken = cur.execute(
                "UPDATE approvals SET status = %s, resolved_at = %s WHERE id = %s AND status = 'pending'",
                ("approved" if approved else "denied", utc_now(), approval_id),
            ).rowcount
            if not taken:
                raise ApprovalNotFound(approval_id, self.location)
            return self._approval(cur, approval_id)

        return self._write("resolve_approval", resolve)

    # --- sessions ---

    def get_session(self, session_id: str) -> Session | None:
        rows = self._read(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = %s", (session_id,))
        return session_record(rows[0], self.location) if rows else None

    def save_session(self, session: Session) -> Session:
        text = encode(session.transcript, run_id=session.id)
        now = utc_now()

        def save(cur: Cursor) -> None:
            # Optimistic: the version read is the condition (an insert of version 1 when it was 0).
            if session.version == 0:
                cur.execute(
                    f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (%s, %s, %s, %s, %s, 1, %s) "
                    "ON CONFLICT (id) DO NOTHING",
                    (session.id, session.agent, text, session.turns, session.pending_turn, now),
                )
            else:
                cur.execute(
                    "UPDATE sessions SET agent = %s, transcript = %s, turns = %s, pending_turn = %s, "
                    "version = version + 1, updated_at = %s WHERE id = %s AND version = %s",
                    (session.agent, text, session.turns, session.pending_turn, now, session.id, session.version),
                )
            if not cur.rowcount:
                raise SessionConflict(session.id, session.version, self.location)

        self._write("save_session", save)
        return Session(session.id, session.agent, decode(text, run_id=session.id, step=None, column="transcript",
                                                         location=self.location, owner="session"),
                       session.turns, session.pending_turn, session.version + 1, now)
