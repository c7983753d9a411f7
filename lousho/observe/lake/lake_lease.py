"""Roles one daemon of the fleet holds at a time (the lake's upkeep, the trigger of each agent): Postgres advisory
locks on the lake's catalog database.

A session-level advisory lock is held by one connection at a time and released by Postgres the moment that
connection ends, so a daemon that dies (SIGKILL, a lost host: its socket closes, or TCP keepalive ends it within
about 25 s) hands its roles to the next daemon that asks, with no expiry to wait out and no clock to trust. A
catalog in a file has one writer at a time anyway: its daemon holds every role.
"""

from __future__ import annotations

import hashlib
import logging
import select
import threading
import urllib.parse

import psycopg

logger = logging.getLogger(__name__)

UPKEEP = "lake.upkeep"
_KEEPALIVES = {"connect_timeout": 5, "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
               "keepalives_count": 3}


def name_role(name: str) -> str:
    """The role of shipping as ``name`` (lake/lake_shipper.py): one live daemon per lake name."""
    return f"name:{name}"


def _check_session(con: psycopg.Connection) -> None:
    """Raise ``psycopg.Error`` if the session ended. No round trip while the server has sent nothing: a check must
    not wait on a server that stopped answering (a lost session shows as something to read, its end or an error)."""
    if select.select([con.fileno()], [], [], 0)[0]:
        con.execute("SELECT 1")


def _close_unless_busy(lock: threading.Lock, close) -> None:
    """Close, unless a check holds ``lock`` for longer than a second (a server that stopped answering): then the
    session ends with the process."""
    if lock.acquire(timeout=1.0):
        try:
            close()
        finally:
            lock.release()


def lock_key(role: str) -> int:
    """A role's advisory-lock key: 63 bits of its name's hash (the same on every daemon)."""
    return int.from_bytes(hashlib.blake2b(f"lousho:{role}".encode(), digest_size=8).digest(), "big") >> 1


class FleetLeases:
    def __init__(self, catalog: str) -> None:
        self._url = catalog if urllib.parse.urlsplit(catalog).scheme in ("postgres", "postgresql") else None
        self._con: psycopg.Connection | None = None
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def try_hold(self, role: str) -> bool:
        """Whether this daemon holds ``role`` now (taking it when free); a lost connection gives every role up."""
        if self._url is None:
            return True
        with self._lock:
            try:
                if self._con is None or self._con.closed:
                    self._held.clear()
                    self._con = psycopg.connect(self._url, autocommit=True, **_KEEPALIVES)
                if role in self._held:
                    _check_session(self._con)  # still connected: still held
                else:
                    row = self._con.execute("SELECT pg_try_advisory_lock(%s)", [lock_key(role)]).fetchone()
                    if row and row[0]:
                        self._held.add(role)
            except psycopg.Error as e:
                logger.warning("the fleet's leases: %s", e)
                self._close()
            return role in self._held

    def close(self) -> None:
        _close_unless_busy(self._lock, self._close)

    def _close(self) -> None:
        self._held.clear()
        self._con = _closed(self._con)


class NameLease:
    """The lake name a daemon ships under, held for its whole life on a session of its own (closing the roles'
    session never gives the name up). Two daemons shipping under one name would each take the other's position for
    their own and skip rows (lake/lake_shipper.py), so the second one refuses to start."""

    def __init__(self, catalog: str, name: str) -> None:
        self.name = name
        self._url = catalog if urllib.parse.urlsplit(catalog).scheme in ("postgres", "postgresql") else None
        self._con: psycopg.Connection | None = None
        self._lock = threading.Lock()
        self.taken = 0  # how many times the name was taken: one more means it was lost in between

    def take(self) -> bool:
        """Take the name if it is free (True: held now); raises ``psycopg.Error`` when the catalog does not answer."""
        if self._url is None:
            self.taken = self.taken or 1
            return True  # a catalog file has one writer at a time: DuckDB's own lock on it
        with self._lock:
            if self._con is not None and not self._con.closed:
                _check_session(self._con)  # still connected: still held
                return True
            self._con = psycopg.connect(self._url, autocommit=True, **_KEEPALIVES)
            try:
                row = self._con.execute("SELECT pg_try_advisory_lock(%s)", [lock_key(name_role(self.name))]).fetchone()
            except BaseException:
                self._close()
                raise
            if not (row and row[0]):
                self._close()
                return False
            self.taken += 1
            return True

    def hold(self) -> bool:
        """Whether this daemon holds its name now: checks its session, taking the name again when the session was
        lost and the name is free. Raises nothing: a catalog that does not answer is "not held"."""
        try:
            return self.take()
        except psycopg.Error as e:
            logger.warning("the lake name %s: %s", self.name, e)
            with self._lock:
                self._close()
            return False

    def close(self) -> None:
        _close_unless_busy(self._lock, self._close)

    def _close(self) -> None:
        self._con = _closed(self._con)


def _closed(con: psycopg.Connection | None) -> None:
    """Close ``con`` if open; its locks go with its session. An error closing a dead session changes nothing."""
    if con is not None:
        try:
            con.close()
        except psycopg.Error:
            pass  # deliberate: the session is gone either way
    return None
