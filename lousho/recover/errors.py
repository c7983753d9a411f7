"""Errors of the recover part: the checkpoint store, durable runs and the run lifecycle.

Each class takes structured fields (run id, step, store file), builds its message and hint from them and keeps
them as attributes; all survive pickling with every field (a child process can raise them to its parent).
``LeaseLost`` is the one that is not a ``LoushoError``: it derives from ``BaseException`` (STYLE §6) so an
agent's ``except Exception`` cannot keep a fenced-out run writing.

A run's ``last_error`` is stored as ``{message, code, category, retryable}`` (DESIGN §5); ``stored_error``
builds that dict from any exception and ``error_from_stored`` rebuilds a ``LoushoError`` from it.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from lousho.kernel.errors import LoushoError, UsageError, retry_after_of

# The code stored for an exception that carries none of its own (a bug, an OSError in a tool): retryable, because
# the recover loop's backoff and quarantine bound how often it is tried again.
UNCLASSIFIED_CODE = "LOUSHO_RUN_EXCEPTION"
# KeyboardInterrupt, SystemExit: the process was stopped, the run was not at fault.
INTERRUPTED_CODE = "LOUSHO_RUN_INTERRUPTED"
STOPPED_CODE = "LOUSHO_RUN_STOPPED"
# What a claim records on a run it finds ``running`` (an attempt began and never recorded an ending: its process
# was killed, crashed or lost its lease). Counted as a failure in a row, so a run that kills every process that
# runs it is quarantined at the cap instead of being retried for ever (DBOS counts dispatches for the same reason).
CRASHED_CODE = "LOUSHO_RUN_CRASHED"
CRASHED_ERROR = {
    "message": "the previous attempt ended without recording an ending: its process was killed or crashed, or "
               "lost its lease",
    "code": CRASHED_CODE, "category": None, "retryable": True,
}


def _restore(cls: type[BaseException], message: str, state: dict[str, Any]) -> BaseException:
    err = cls.__new__(cls)
    BaseException.__init__(err, message)
    err.__dict__.update(state)
    return err


class RecoverError(LoushoError):
    """Base of the recover part's errors; pickles with its structured fields (not only the message)."""

    code = "LOUSHO_RECOVER_ERROR"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.message, dict(self.__dict__)))


def redact_url(url: str) -> str:
    """The URL with any password replaced by stars (STYLE: no secrets in messages or logs)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class UnsupportedStoreUrl(UsageError):
    code = "LOUSHO_STORE_UNSUPPORTED_URL"

    def __init__(self, url: str) -> None:
        self.url = redact_url(url)
        super().__init__(
            f"unsupported store URL {self.url!r}",
            hint="use sqlite:///path/to/runs.db (three slashes: relative path, four: absolute) or "
                 "postgresql://user:password@host:port/dbname",
        )

    __reduce__ = RecoverError.__reduce__


class StoreNotSqlite(UsageError):
    """A Postgres URL where a SQLite file is wanted (``store.parse_url``: readers of the SQLite file alone)."""

    code = "LOUSHO_STORE_NOT_SQLITE"

    def __init__(self, url: str) -> None:
        self.url = redact_url(url)
        super().__init__(
            f"{self.url} names a Postgres run store, not a SQLite file",
            hint="this reads SQLite run stores only: pass sqlite:///path/to/runs.db",
        )

    __reduce__ = RecoverError.__reduce__


class StoreMissing(RecoverError):
    code = "LOUSHO_STORE_MISSING"

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"there is no run store at {path}",
            hint=f"runs are recorded in {path} once an agent runs durably; pass --store URL for another store",
        )


class StoreNotRunStore(RecoverError):
    """An existing file that is not a lousho run store: another program's SQLite database, or not SQLite."""

    code = "LOUSHO_STORE_NOT_A_RUN_STORE"

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(
            f"{path} is not a lousho run store: {why}; it was left as it was",
            hint="pass --store sqlite:///path/to/runs.db naming a new file or an existing run store",
        )

    __reduce__ = RecoverError.__reduce__


class StoreBusy(RecoverError):
    """Another process held the write lock for longer than the busy timeout."""

    code = "LOUSHO_STORE_BUSY"
    retryable = True

    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self.timeout_s = timeout_s
        super().__init__(
            f"the run store {path} stayed locked for {timeout_s:g} s",
            hint=f"another process holds a long write transaction on {path}; retry, or look for a stuck writer",
        )


class StoreUnavailable(RecoverError):
    """The database server cannot be reached or refused the connection (a Postgres store).

    Retryable unless the server said something waiting will not fix (wrong password, no such database). Also
    raised when the connection broke while COMMIT was in flight: the write may or may not have committed, so it
    is not retried blindly; the caller re-reads the run before writing again.
    """

    code = "LOUSHO_STORE_UNAVAILABLE"
    retryable = True

    def __init__(self, location: str, reason: str, *, retryable: bool = True) -> None:
        self.location = location
        self.reason = reason
        self.retryable = retryable
        super().__init__(
            f"the run store {location} is unavailable: {reason}",
            hint=f"check that the database server of {location} is up and the URL's user, password and database "
                 "are right",
        )


class StoreFailed(RecoverError):
    """The database refused a statement for a reason of its own: a corrupt SQLite file, a full disk, an I/O error,
    a read-only Postgres (a standby, ``default_transaction_read_only``), missing privileges. What is not a lock
    held too long (``StoreBusy``) nor a server out of reach (``StoreUnavailable``). Nothing of the refused
    transaction was written. Retryable: the recover loop's backoff and quarantine bound it, and a run must not be
    failed for good over its store's trouble."""

    code = "LOUSHO_STORE_FAILED"
    retryable = True

    def __init__(self, location: str, reason: str, sqlstate: str | None = None) -> None:
        self.location = location
        self.reason = reason
        self.sqlstate = sqlstate
        said = f" (SQLSTATE {sqlstate})" if sqlstate else ""
        super().__init__(
            f"the run store {location} refused the operation{said}: {reason}; nothing of it was written",
            hint=f"check {location}: free disk space, its permissions, that it is writable (not a read-only "
                 "standby), and for a SQLite file `PRAGMA integrity_check`",
        )


class SchemaTooNew(RecoverError):
    code = "LOUSHO_STORE_SCHEMA_TOO_NEW"

    def __init__(self, path: str, found: int, known: int) -> None:
        self.path = path
        self.found = found
        self.known = known
        super().__init__(
            f"the run store {path} has schema version {found}; this lousho knows up to {known}",
            hint=f"{path} was written by a newer lousho; upgrade lousho to use it",
        )


class RunNotFound(RecoverError):
    code = "LOUSHO_RUN_NOT_FOUND"

    def __init__(self, run_id: str, path: str) -> None:
        self.run_id = run_id
        self.path = path
        super().__init__(
            f"no run {run_id!r} in {path}",
            hint=f"`lousho runs pending --store ...` lists the unfinished runs in {path}",
        )


class RunExists(RecoverError):
    code = "LOUSHO_RUN_EXISTS"

    def __init__(self, run_id: str, path: str) -> None:
        self.run_id = run_id
        self.path = path
        super().__init__(
            f"run {run_id!r} already exists in {path}",
            hint=f"resume run {run_id} instead of starting it, or pick a new run id",
        )


class RunNotResumable(RecoverError):
    code = "LOUSHO_RUN_NOT_RESUMABLE"

    def __init__(self, run_id: str, status: str) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(
            f"run {run_id!r} is {status} and cannot be resumed",
            hint=f"run {run_id} ended; fork it (a new run id) to run it again",
        )


class RunAwaitingApproval(RecoverError):
    code = "LOUSHO_RUN_AWAITING_APPROVAL"

    def __init__(self, run_id: str, approval_ids: list[str]) -> None:
        self.run_id = run_id
        self.approval_ids = approval_ids
        super().__init__(
            f"run {run_id!r} waits for approval {', '.join(approval_ids)}",
            hint=f"resolve approval {approval_ids[0]} of run {run_id} first; then resume it",
        )


class RunClosed(RecoverError):
    """A step or a second ending on a run this handle already ended (finished, failed, stopped, paused)."""

    code = "LOUSHO_RUN_CLOSED"

    def __init__(self, run_id: str, status: str) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(
            f"run {run_id!r} was already ended here ({status})",
            hint=f"resume run {run_id} to open a new handle on it",
        )


class RunDiverged(RecoverError):
    """The code asked for a different step than the one recorded at this index (DBOS ``UnexpectedStep``)."""

    code = "LOUSHO_RUN_DIVERGED"

    def __init__(self, run_id: str, step: int, recorded: str, called: str) -> None:
        self.run_id = run_id
        self.step = step
        self.recorded = recorded
        self.called = called
        super().__init__(
            f"run {run_id!r} diverged at step {step}: recorded {recorded!r}, the code now calls {called!r}",
            hint=f"the code of run {run_id} changed since step {step} was recorded; fork it from step {step}",
        )


class NestedStep(RecoverError):
    """``run.step`` called from inside another step's function: replay could not know the inner step ran."""

    code = "LOUSHO_RUN_NESTED_STEP"

    def __init__(self, run_id: str, outer: str, inner: str) -> None:
        self.run_id = run_id
        self.outer = outer
        self.inner = inner
        super().__init__(
            f"run {run_id!r}: step {inner!r} was called inside step {outer!r}",
            hint=f"in run {run_id}, call step {inner!r} after step {outer!r} returns, not inside it",
        )


class CheckpointNotFound(RecoverError):
    code = "LOUSHO_CHECKPOINT_NOT_FOUND"

    def __init__(self, run_id: str, step: int, kept: list[int]) -> None:
        self.run_id = run_id
        self.step = step
        self.kept = kept
        shown = ", ".join(map(str, kept)) if kept else "none"
        super().__init__(
            f"run {run_id!r} has no step {step} to fork from; steps kept: {shown}",
            hint=f"fork run {run_id} from a kept step, or from {len(kept)} to copy every step",
        )


class CheckpointCorrupt(RecoverError):
    """A stored JSON value could not be decoded: raised instead of a bare ``JSONDecodeError``."""

    code = "LOUSHO_CHECKPOINT_CORRUPT"

    def __init__(self, run_id: str, step: int | None, column: str, path: str, owner: str = "run") -> None:
        self.run_id = run_id  # the session id when ``owner`` is "session"
        self.step = step
        self.column = column
        self.path = path
        self.owner = owner
        where = f"{owner} {run_id!r}" if step is None else f"{owner} {run_id!r} step {step}"
        super().__init__(
            f"{where}: the stored {column} is not valid JSON",
            hint=f"inspect {where} in {path}; delete or fork {owner} {run_id} to get past it",
        )


class OutputNotJson(RecoverError):
    code = "LOUSHO_CHECKPOINT_NOT_JSON"

    def __init__(self, run_id: str, step: int | None, reason: str) -> None:
        self.run_id = run_id
        self.step = step
        self.reason = reason
        where = f"run {run_id!r}" if step is None else f"run {run_id!r} step {step}"
        super().__init__(
            f"{where}: the value to record is not JSON ({reason})",
            hint="a step returns dict, list, str, int, float (finite), bool or None, nested",
        )


class ApprovalNotFound(RecoverError):
    """Unknown, or already resolved: resolving is take-once."""

    code = "LOUSHO_APPROVAL_NOT_FOUND"

    def __init__(self, approval_id: str, path: str) -> None:
        self.approval_id = approval_id
        self.path = path
        super().__init__(
            f"no pending approval {approval_id!r} in {path}",
            hint=f"approval {approval_id} is unknown or was already resolved (each resolves once)",
        )


class ApprovalExists(RecoverError):
    code = "LOUSHO_APPROVAL_EXISTS"

    def __init__(self, approval_id: str, path: str) -> None:
        self.approval_id = approval_id
        self.path = path
        super().__init__(
            f"approval {approval_id!r} already exists in {path}",
            hint=f"approval ids are unique; get approval {approval_id} instead of creating it again",
        )


class SessionConflict(RecoverError):
    """An optimistic session save lost: another writer saved the session since it was read."""

    code = "LOUSHO_SESSION_CONFLICT"
    retryable = True

    def __init__(self, session_id: str, expected: int, path: str) -> None:
        self.session_id = session_id
        self.expected = expected
        self.path = path
        super().__init__(
            f"session {session_id!r} changed since version {expected} was read",
            hint=f"reload session {session_id} from {path} and apply the change again",
        )


class RunNotEnded(RecoverError):
    """The recover loop's app returned, or raised, without the run recording how its attempt ended.

    The loop records this (or the app's own error) as the run's failure, so that backoff and quarantine still
    bound an app that never opens the run (a wrong agent directory, a bug before ``durable.resume``).
    """

    code = "LOUSHO_RECOVER_RUN_NOT_ENDED"
    retryable = True

    def __init__(self, run_id: str, status: str) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(
            f"run {run_id!r}: the recover app returned with the run still {status}",
            hint=f"the app's resume(run_id, epoch) must open run {run_id} with durable.resume(store, run_id, "
                 "epoch=epoch) and run it to an ending (finish, fail, stop or wait for approval)",
        )


class AppInvalid(UsageError):
    """``lousho recover --app MODULE:OBJ`` named nothing usable."""

    code = "LOUSHO_RECOVER_APP_INVALID"

    def __init__(self, spec: str, reason: str) -> None:
        self.spec = spec
        self.reason = reason
        super().__init__(
            f"--app {spec}: {reason}",
            hint="give MODULE:OBJ where OBJ has resume(run_id, epoch), or is such a function, or a class whose "
                 "instances (made without arguments) have it",
        )

    __reduce__ = RecoverError.__reduce__


class LeaseLost(BaseException):
    """A fenced write was refused: the run's lease epoch moved past the writer's. Stop this run here.

    A ``BaseException`` on purpose (STYLE §6, like DBOS's ``DBOSWorkflowCancelledError``): agent code that catches
    ``Exception`` must not keep a fenced-out run going. Carries the same fields as a ``LoushoError``.
    """

    code = "LOUSHO_LEASE_LOST"
    retryable = True  # for the run: its new owner carries on

    def __init__(self, run_id: str, epoch: int, current: int) -> None:
        self.run_id = run_id
        self.epoch = epoch
        self.current = current
        self.message = f"run {run_id!r}: lease lost, this writer holds epoch {epoch} but the run is at {current}"
        self.hint = f"another process took run {run_id} over; this one must stop (its writes are refused)"
        super().__init__(self.message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.message, dict(self.__dict__)))

    def to_dict(self) -> dict[str, Any]:
        return {"message": self.message, "code": self.code, "retryable": self.retryable}

    def __str__(self) -> str:
        return self.message


def stored_error(exc: BaseException) -> dict[str, Any]:
    """The ``{message, code, category, retryable}`` dict stored as a run's ``last_error``, plus
    ``retry_after`` (seconds) when a provider error carried the provider's ``Retry-After``.

    A ``LoushoError`` (or ``LeaseLost``) keeps its code and retryability, and its ``category`` when it has one
    (provider errors do). Anything else is stored as retryable with ``UNCLASSIFIED_CODE``, or
    ``INTERRUPTED_CODE`` for a ``BaseException`` that stopped the process.
    """
    if isinstance(exc, LoushoError | LeaseLost):
        out = dict(exc.to_dict())
        out.setdefault("category", getattr(exc, "category", None))
        # The provider's Retry-After (seconds), kept only when given: the loop's backoff honours it.
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, int | float) and not isinstance(retry_after, bool) and retry_after >= 0:
            out["retry_after"] = float(retry_after)
        return out
    code = UNCLASSIFIED_CODE if isinstance(exc, Exception) else INTERRUPTED_CODE
    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return {"message": message, "code": code, "category": None, "retryable": True}


class StoredError(LoushoError):
    """An error rebuilt from a stored ``last_error``: the same code, retryability and category."""

    def __init__(self, message: str, *, code: str, retryable: bool, category: str | None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, code=code, retryable=retryable)
        self.category = category
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.message, dict(self.__dict__)))

    def to_dict(self) -> dict[str, Any]:
        out = {**super().to_dict(), "category": self.category}
        if self.retry_after is not None:
            out["retry_after"] = self.retry_after
        return out


def error_from_stored(stored: dict[str, Any]) -> StoredError:
    return StoredError(
        str(stored.get("message", "")),
        code=str(stored.get("code", UNCLASSIFIED_CODE)),
        retryable=bool(stored.get("retryable", True)),
        category=stored.get("category"),
        retry_after=retry_after_of(stored),
    )
