"""Which daemon of the fleet runs the lake's upkeep: the one holding a Postgres advisory lock on the catalog.

A session-level advisory lock is held by one connection at a time and released by Postgres the moment that
connection ends, so a daemon that dies (SIGKILL, a lost host: its socket closes, or TCP keepalive ends it)
hands the role to the next daemon that asks, with no expiry to wait out and no clock to trust. A catalog in a
file has one writer at a time anyway: its daemon always holds the role.
"""

from __future__ import annotations

import logging
import urllib.parse

import psycopg

logger = logging.getLogger(__name__)

# One 64-bit key for the lake's upkeep in the catalog's database ("lousho.lake.upkeep").
UPKEEP_KEY = 0x6C6F7573686F7570


class UpkeepLease:
    def __init__(self, catalog: str) -> None:
        self._url = catalog if urllib.parse.urlsplit(catalog).scheme in ("postgres", "postgresql") else None
        self._con: psycopg.Connection | None = None
        self.held = self._url is None

    def try_hold(self) -> bool:
        """Whether this daemon holds the role now (taking it when free); a lost connection gives it up."""
        if self._url is None:
            return True
        try:
            if self._con is None or self._con.closed:
                self.held = False
                self._con = psycopg.connect(self._url, autocommit=True, connect_timeout=5,
                                            keepalives=1, keepalives_idle=10, keepalives_interval=5,
                                            keepalives_count=3)
            if not self.held:
                row = self._con.execute("SELECT pg_try_advisory_lock(%s)", [UPKEEP_KEY]).fetchone()
                self.held = bool(row and row[0])
            else:
                self._con.execute("SELECT 1")  # still connected: still held
        except psycopg.Error as e:
            logger.warning("the lake's upkeep lease: %s", e)
            self.close()
        return self.held

    def close(self) -> None:
        self.held = self._url is None
        if self._con is not None:
            try:
                self._con.close()
            except psycopg.Error:
                pass
            self._con = None
