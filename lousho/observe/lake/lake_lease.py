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
import threading
import urllib.parse

import psycopg

logger = logging.getLogger(__name__)

UPKEEP = "lake.upkeep"


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
                    self._con = psycopg.connect(self._url, autocommit=True, connect_timeout=5, keepalives=1,
                                                keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
                if role in self._held:
                    self._con.execute("SELECT 1")  # still connected: still held
                else:
                    row = self._con.execute("SELECT pg_try_advisory_lock(%s)", [lock_key(role)]).fetchone()
                    if row and row[0]:
                        self._held.add(role)
            except psycopg.Error as e:
                logger.warning("the fleet's leases: %s", e)
                self._close()
            return role in self._held

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        self._held.clear()
        if self._con is not None:
            try:
                self._con.close()
            except psycopg.Error:
                pass
            self._con = None
