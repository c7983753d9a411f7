"""One Postgres connection for a store object: connect, reconnect, and retry only what is safe to retry.

Retry rule (STYLE §8, DBOS ``db_retry``): the whole transaction is re-run, never one statement, and only for

- serialization failures and deadlocks (40001, 40P01): Postgres rolled the transaction back, re-running it is
  exactly what the server asks for;
- a connection lost *before* COMMIT was sent, or a failed connect: the server rolls back an open transaction
  whose client went away, so nothing of it committed.

A connection lost *while COMMIT was in flight* is not retried: the write may have committed, and several writes
are not idempotent (``record_failure``, ``bump_epoch``), so it surfaces as ``StoreUnavailable``. Anything else
is ``StoreFailed`` (coded, with the SQLSTATE: a read-only server, missing privileges, a full disk). Retries sleep
with full jitter, doubling from ``BASE_DELAY_S`` up to ``MAX_DELAY_S``, at most ``MAX_ATTEMPTS`` tries in all; a
server that stays down is ``StoreUnavailable`` (retryable), so the caller's own backoff (the recover loop's) takes
over rather than this one hanging.
"""

from __future__ import annotations

import random
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from lousho.recover.errors import StoreBusy, StoreFailed, StoreUnavailable, redact_url

T = TypeVar("T")

MAX_ATTEMPTS = 6
BASE_DELAY_S = 0.02
MAX_DELAY_S = 1.0
# The jitter source: its own generator, so the store never draws from (or depends on a seed of) the global one.
_jitter = random.Random()

# Connection settings a URL may override: bounded connects, and TCP keepalives so that a server that vanished
# without a FIN (a partition, a dead VM) surfaces in ~30 s instead of after the OS default of 2 hours.
CONNECT_DEFAULTS = {
    "connect_timeout": "10",
    "application_name": "lousho",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}
# What the server says when waiting will not help: wrong password or user, no such database. A failed connect
# carries no SQLSTATE in psycopg (libpq keeps only the server's text), so connects are also matched on the text
# of those errors. Servers localise it (lc_messages): an unmatched one counts as transient, the safe side (a few
# retries, then a retryable StoreUnavailable).
_PERMANENT = (pg_errors.InvalidPassword, pg_errors.InvalidAuthorizationSpecification, pg_errors.InvalidCatalogName)
_PERMANENT_CONNECT = ("authentication failed", "no pg_hba.conf entry", "does not exist", "no password supplied")
_TRANSIENT = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


def libpq_url(url: str) -> str:
    """The URL libpq reads: ``postgresql+psycopg://`` (SQLAlchemy style) loses its driver suffix."""
    scheme, rest = url.split(":", 1)
    return scheme.split("+", 1)[0] + ":" + rest


def redact(url: str) -> str:
    """The URL with its password hidden, in the userinfo and in a ``password=`` query parameter alike."""
    parts = urllib.parse.urlsplit(redact_url(url))
    if "password=" not in parts.query:
        return parts.geturl()
    query = [(k, "***" if k == "password" else v) for k, v in urllib.parse.parse_qsl(parts.query, True)]
    return parts._replace(query=urllib.parse.urlencode(query, safe="*/:,")).geturl()


def _delays() -> list[float]:
    return [_jitter.uniform(0, min(MAX_DELAY_S, BASE_DELAY_S * 2**i)) for i in range(MAX_ATTEMPTS - 1)]


class PgConnection:
    """A lazily (re)opened connection, in autocommit: reads are one statement, writes are explicit transactions
    (``BEGIN``/``COMMIT`` through ``conn.transaction()``) pinned to READ COMMITTED, the level the store's locking
    is written for. Not thread-safe by itself: the store serialises calls with its lock."""

    def __init__(self, url: str, location: str, lock_timeout_s: float) -> None:
        params = conninfo_to_dict(libpq_url(url))
        for key, value in CONNECT_DEFAULTS.items():
            params.setdefault(key, value)
        self._params = params
        self.location = location
        self._lock_timeout_ms = int(lock_timeout_s * 1000)
        self.lock_timeout_s = lock_timeout_s
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False

    def _connect(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise psycopg.InterfaceError(f"the run store {self.location} was closed")
        if self._conn is None or self._conn.closed:
            self._conn = None  # while None, a failure is the connect's (see _unretryable)
            conn = psycopg.connect(**self._params, autocommit=True)
            try:
                conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
                # A lock held past this (a stuck writer, a leaked transaction) is StoreBusy, not a hang: the SQLite
                # store's busy timeout, in Postgres terms.
                conn.execute(f"SET lock_timeout = {self._lock_timeout_ms}")
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def run(self, body: Callable[[psycopg.Cursor[Any]], T], *, write: bool,
            before_commit: Callable[[], None] | None = None) -> T:
        """``body`` on a cursor: inside one transaction when ``write``, else as autocommit statements (reads, and
        single-statement writes that are idempotent, which a retry may apply twice).
        Retried as the module docstring says; ``before_commit`` runs inside the transaction, after ``body``."""
        delays = _delays()
        while True:
            committing = False
            try:
                conn = self._connect()
                if not write:
                    with conn.cursor() as cur:
                        return body(cur)
                with conn.transaction(), conn.cursor() as cur:
                    result = body(cur)
                    if before_commit is not None:
                        before_commit()
                    committing = True  # from here the failure, if any, is the COMMIT's
                return result
            except pg_errors.LockNotAvailable as e:
                raise StoreBusy(self.location, self.lock_timeout_s) from e
            except psycopg.Error as e:
                error = self._unretryable(e, committing and write)
                if error is e:  # the server refused the statement (read-only, privileges, disk): coded, no traceback
                    raise StoreFailed(self.location, _reason(e), e.sqlstate) from e
                if error is not None:
                    raise error from e
                if not delays:
                    if isinstance(e, _TRANSIENT):
                        raise
                    raise StoreUnavailable(self.location, _reason(e)) from e
                time.sleep(delays.pop(0))

    def _unretryable(self, e: psycopg.Error, committing: bool) -> BaseException | None:
        """None when the transaction may be re-run; else the error to raise."""
        if isinstance(e, _TRANSIENT):
            return None
        connecting = self._conn is None
        if isinstance(e, _PERMANENT) or (connecting and any(text in str(e) for text in _PERMANENT_CONNECT)):
            return StoreUnavailable(self.location, _reason(e), retryable=False)
        lost = isinstance(e, psycopg.OperationalError) and (connecting or self._conn.broken)
        if not lost:
            return e  # refused by the server (or a bug): run() raises it as StoreFailed
        if self._conn is not None:
            self._conn.close()  # reopened by the next try or the next call
            self._conn = None
        if committing:
            return StoreUnavailable(self.location, f"the connection broke during COMMIT ({_reason(e)}); "
                                    "the write may or may not have committed")
        return None


def _reason(e: BaseException) -> str:
    """The first line of the driver's message (the rest repeats the URL or is libpq's advice)."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
