"""A throwaway Postgres server for the tests: initdb into a temp dir, started on a free loopback port.

The server refuses to run as root, so as root (CI, ``.ci/run``) every server command runs as the ``postgres`` OS
user that the Debian package creates (``runuser``); the temp dir is handed to that user. The binaries come from
``/usr/lib/postgresql/<version>/bin`` (Debian keeps them off PATH); ``make test`` installs the package when none
is there. Connections go over TCP to 127.0.0.1 with a scram password, as a real deployment's would, so the store's
password hiding is exercised too.

The server trades durability for speed (``fsync=off``): tests kill clients and restart the server cleanly or
with ``-m immediate``, a crash whose WAL is still in the OS page cache, so recovery replays every acknowledged
commit; only a power loss or an OS crash would lose some, and no test makes one.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

SUPERUSER = "postgres"
START_TIMEOUT_S = 60
# Server settings for a test cluster: loopback only, a socket dir we own, and no fsync (see the module docstring).
# Not synchronous_commit=off: COMMIT would return before the WAL reached even the OS, and a crash (stop -m
# immediate) would lose acknowledged checkpoints, which test_postgres_restart.py checks never happens.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "log_min_messages": "warning",
    # Commit times of rows (pg_xact_commit_timestamp), so a race test can check the order fenced writes committed in.
    "track_commit_timestamp": "on",
}


def find_bindir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding initdb."""
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    if not found:
        raise RuntimeError("no initdb under /usr/lib/postgresql/*/bin: run `make test` (it installs postgresql) "
                           "or `apt-get install -y postgresql`")
    return max(found, key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.name)] or [0])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgServer:
    """One cluster in ``root`` (data dir, socket dir, log); ``start``/``stop`` keep the data dir."""

    def __init__(self, root: Path, bindir: Path) -> None:
        self.root = root
        self.bindir = bindir
        self.datadir = root / "data"
        self.sockdir = root / "sock"
        self.logfile = root / "server.log"
        self.password = secrets.token_hex(16)
        self.port = 0
        self._names = itertools.count(1)

    # --- server commands, as the postgres user when we are root ---

    def _cmd(self, tool: str, *args: str) -> list[str]:
        command = [str(self.bindir / tool), *args]
        return ["runuser", "-u", SUPERUSER, "--", *command] if os.geteuid() == 0 else command

    def _run(self, tool: str, *args: str, timeout: float = START_TIMEOUT_S) -> None:
        done = subprocess.run(self._cmd(tool, *args), capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if done.returncode != 0:
            log = self.logfile.read_text()[-3000:] if self.logfile.exists() else ""
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}{log}")

    def init(self) -> None:
        self.sockdir.mkdir()
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            for path in (self.root, self.sockdir, pwfile):
                shutil.chown(path, SUPERUSER, SUPERUSER)
        # --locale=C: the store must not depend on the database collation anyway (store_postgres pins "C" on its
        # columns); C keeps initdb independent of the machine's locales.
        self._run("initdb", "-D", str(self.datadir), "-U", SUPERUSER, f"--pwfile={pwfile}", "--auth=scram-sha-256",
                  "--locale=C", "--encoding=UTF8", "--no-sync")
        pwfile.unlink()
        settings = {**SETTINGS, "unix_socket_directories": f"'{self.sockdir}'"}
        with (self.datadir / "postgresql.auto.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def start(self) -> None:
        """Start on a free port the first time; a restart keeps its port, so the URLs handed out stay valid."""
        if self.port:
            self._pg_ctl_start()
            return
        for _ in range(5):
            self.port = free_port()  # racy between its close and the server's bind: retried
            try:
                self._pg_ctl_start()
                return
            except RuntimeError as e:
                if "could not bind" not in str(e):
                    raise
        raise RuntimeError(f"no free port for Postgres after 5 tries; see {self.logfile}")

    def _pg_ctl_start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-t", str(START_TIMEOUT_S), "-D", str(self.datadir), "-l", str(self.logfile),
                  "-o", f"-p {self.port}")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: a clean shutdown (clients disconnected); ``immediate``: a crash, recovered at the next start."""
        self._run("pg_ctl", "stop", "-w", "-t", str(START_TIMEOUT_S), "-D", str(self.datadir), "-m", mode)

    def running(self) -> bool:
        done = subprocess.run(self._cmd("pg_ctl", "status", "-D", str(self.datadir)), capture_output=True,
                              cwd=self.root)
        return done.returncode == 0

    # --- databases and URLs ---

    def url(self, dbname: str = "postgres", schema: str | None = None) -> str:
        """A store URL; with ``schema``, libpq's ``options`` puts it first on the search path."""
        url = f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{dbname}"
        if schema is not None:
            url += "?options=" + urllib.parse.quote(f"-c search_path={schema}")
        return url

    def admin(self, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(self.url(dbname), autocommit=True)

    @contextmanager
    def fresh_schema(self, dbname: str = "postgres") -> Iterator[str]:
        """A new empty schema (a few ms, unlike a database's copy of template0) and the URL that uses it; dropped
        afterwards. Stores opened on the URL create their tables there."""
        schema = f"t{os.getpid()}_{next(self._names)}"
        with self.admin(dbname) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        try:
            yield self.url(dbname, schema)
        finally:
            with self.admin(dbname) as conn:
                conn.execute("SET lock_timeout = '10s'")  # a leaked open transaction fails the drop, not hangs it
                conn.execute(f"DROP SCHEMA {schema} CASCADE")

    @contextmanager
    def fresh_database(self, options: str = "") -> Iterator[str]:
        """A new database (the default schema ``public``) and its URL; dropped afterwards, clients and all.
        ``options`` go to CREATE DATABASE (``LOCALE_PROVIDER icu ICU_LOCALE 'en-US'``...)."""
        name = f"db{os.getpid()}_{next(self._names)}"
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 {options}")
        try:
            yield self.url(name)
        finally:
            with self.admin() as conn:
                conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@contextmanager
def postgres_server() -> Iterator[PgServer]:
    """A started server in a new temp dir; stopped and removed in ``finally``, whatever happened."""
    root = Path(tempfile.mkdtemp(prefix="lousho-pg-"))
    server = PgServer(root, find_bindir())
    try:
        server.init()
        server.start()
        yield server
    finally:
        try:
            if server.datadir.exists() and server.running():
                server.stop("immediate")  # nothing to keep: skip the shutdown checkpoint
        finally:
            shutil.rmtree(root, ignore_errors=True)
