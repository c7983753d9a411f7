"""The daemon's side of the lake: the lake's process (lake_worker.py) started in its own environment, and its
requests (open, migrate, position, commit, query, upkeep) as methods.

Catalogs: a Postgres URL (``postgresql://user:password@host:port/db``: many daemons write at once) or a file path
(DuckLake's DuckDB catalog: one writer at a time, for a single machine). The Postgres password goes to the lake's
process in a libpq passfile for the catalog's host, port, database and user alone (never ``PGPASSWORD``, which libpq
sends to any server), never in the ``ATTACH`` text a query could read back.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from lousho.observe.errors import LakeFailed, LakeUnavailable
from lousho.observe.lake import lake_schema
from lousho.observe.lake.lake_worker import ipc_bytes, read_frame, write_frame
from lousho.observe.sql.sql_guard import LakeFunction

PYTHON_ENV = "LOUSHO_LAKE_PYTHON"
# A query's process is killed this long past its time limit if it has not answered (the catalog stopped answering).
QUERY_GRACE_S = 2.0
FENCE_TIMEOUT_S = 30.0
# The worker's error classes that mean the lake cannot be reached (its catalog or files), not that a request failed.
OUTAGE_KINDS = frozenset({"IOException", "ConnectionException", "OSError", "FileNotFoundError"})
# After one of these DuckDB has invalidated the process's database: every later statement fails. An internal error
# (an assertion of DuckDB's own) came from the lake's ``runs`` once in a few dozen runs with DuckDB 1.5.5.
BROKEN_KINDS = frozenset({"InternalException", "FatalException"})
# libpq's own bounds on the worker's catalog connections: a catalog that does not answer the connection, or a
# connection whose peer vanished, fails rather than waits forever (the URL may set its own).
LIBPQ_DEFAULTS = {"connect_timeout": "10", "keepalives": "1", "keepalives_idle": "30", "keepalives_interval": "10",
                  "keepalives_count": "3"}
# The passfile's private directory: this prefix, the pid of the process that wrote it, mkdtemp's random part.
_PASSFILE_PREFIX = "lousho-lake-"
_PASSFILE_DIR = re.compile(rf"{_PASSFILE_PREFIX}([0-9]+)-[^/]+")
# Where ``lousho lake setup`` builds the lake's environment by default.
DEFAULT_VENV = Path.home() / ".local" / "share" / "lousho" / "lake-venv"
WORKER = Path(__file__).with_name("lake_worker.py")


@dataclass(frozen=True)
class LakeTarget:
    """Where the lake is: its catalog (a Postgres URL or a DuckLake catalog file) and its data directory."""

    catalog: str
    data_path: str

    def attach(self) -> tuple[str, str | None]:
        """DuckLake's ATTACH string and, for a Postgres catalog with a password, the passfile's text
        (``host:port:dbname:user:password``) that gives libpq the password for that server alone."""
        if urllib.parse.urlsplit(self.catalog).scheme in ("postgres", "postgresql"):
            params, password = catalog_params(self.catalog)
            password = password or os.environ.get("PGPASSWORD")
            return f"ducklake:postgres:{libpq_dsn(params)}", passfile_text(params, password) if password else None
        return f"ducklake:{Path(self.catalog).resolve()}", None

    def describe(self) -> str:
        """The catalog without its password, for logs and the ready line."""
        parsed = urllib.parse.urlsplit(self.catalog)
        if parsed.password:
            netloc = f"{parsed.username}:***@{parsed.hostname}:{parsed.port}"
            return urllib.parse.urlunsplit(parsed._replace(netloc=netloc))
        return self.catalog


def catalog_params(url: str) -> tuple[dict[str, str], str | None]:
    """The catalog URL's libpq parameters, as libpq reads them (every query option such as ``sslmode``,
    ``sslrootcert`` or ``options`` kept, names percent-decoded), without the password, and the password."""
    # psycopg loads here, not with the module: a daemon without a lake imports this module and never needs it.
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    except psycopg.ProgrammingError as e:
        raise LakeUnavailable(f"the lake's catalog URL does not parse: {e}") from None
    password = params.pop("password", None)
    if password:
        params.pop("passfile", None)  # the password of the URL goes in the passfile written for it
    for key, default in (("host", "127.0.0.1"), ("port", "5432"), ("user", "postgres"), ("dbname", "postgres"),
                         *LIBPQ_DEFAULTS.items()):
        params.setdefault(key, default)
    return params, password


def libpq_dsn(params: dict[str, str]) -> str:
    """``key='value' ...``, each value quoted as libpq's conninfo reads it."""
    def quoted(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " ".join(f"{key}={quoted(value)}" for key, value in params.items())


def passfile_text(params: dict[str, str], password: str) -> str:
    """The catalog's line of a libpq password file: the password goes to that host, port, database and user
    only (``PGPASSWORD`` would go to any server a connection of the lake's process reaches)."""
    def field(value: str) -> str:
        return value.replace("\\", "\\\\").replace(":", "\\:")

    hosts = params.get("host", "localhost").split(",")
    ports = params.get("port", "5432").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    return "".join(f"{field(h)}:{field(p)}:{field(params['dbname'])}:{field(params['user'])}:{field(password)}\n"
                   for h, p in zip(hosts, ports, strict=False))


def write_passfile(text: str, root: Path | None = None) -> Path:
    """``text`` in a new private directory (0700) under ``root`` (the temporary directory), the file 0600 as libpq
    requires; removed with the directory by ``remove_passfile`` when the lake's process stops. The directory is
    named for this process, so that the next to write one removes it if this process was killed first
    (``remove_stale_passfiles``)."""
    remove_stale_passfiles(root)
    directory = Path(tempfile.mkdtemp(prefix=f"{_PASSFILE_PREFIX}{os.getpid()}-", dir=root))
    path = directory / "pgpass"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return path


def remove_passfile(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path.parent, ignore_errors=True)


def remove_stale_passfiles(root: Path | None = None) -> int:
    """Remove this user's passfile directories under ``root`` (the temporary directory) whose process is gone: a
    daemon killed with SIGKILL cannot remove its own, and each held a catalog password. Returns how many."""
    removed = 0
    for entry in Path(root or tempfile.gettempdir()).glob(f"{_PASSFILE_PREFIX}*"):
        named = _PASSFILE_DIR.fullmatch(entry.name)
        try:
            if not named or not entry.is_dir() or entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue  # gone meanwhile
        if not _alive(int(named.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a reused pid keeps a stale directory until that process ends too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def lake_python(configured: str | None = None) -> str:
    """The lake environment's Python: as configured, else $LOUSHO_LAKE_PYTHON, else ``.venv-lake`` beside this
    environment (the layout ``make lake-venv`` builds), else where ``lousho lake setup`` builds it."""
    for candidate in (configured, os.environ.get(PYTHON_ENV), str(Path(sys.prefix).parent / ".venv-lake/bin/python"),
                      str(DEFAULT_VENV / "bin" / "python")):
        if candidate and Path(candidate).exists():
            return candidate
    raise LakeUnavailable("no Python environment for the lake: DuckLake needs DuckDB 1.5.5 and its extensions, "
                          f"which lousho's DuckDB 2 cannot load (looked at --lake-python, ${PYTHON_ENV}, "
                          f"{Path(sys.prefix).parent / '.venv-lake'}, {DEFAULT_VENV})",
                          hint="run `lousho lake setup` (or `make lake-venv` in a checkout)")


class LakeClient:
    """One lake process, one request at a time (a lock serialises callers)."""

    def __init__(self, target: LakeTarget, *, read_only: bool = False, python: str | None = None,
                 memory_limit: str | None = None, open_timeout_s: float | None = None) -> None:
        self.target = target
        attach, secret = target.attach()
        Path(target.data_path).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fence: tuple[list[LakeFunction], list[str]] | None = None
        self._killed = False
        self.broken = False  # the process's database invalidated (BROKEN_KINDS): never used again
        # Never PGPASSWORD (libpq would send it to any server a query names): a passfile for the catalog alone.
        env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
        self._passfile = write_passfile(secret) if secret else None
        if self._passfile is not None:
            env["PGPASSFILE"] = str(self._passfile)
        # SQL may read DuckDB's temporary directory even with external access off (an in-memory instance's is
        # ``.tmp`` in the working directory): the read-only lake spills to a private directory on the data's
        # disk (not /tmp, often memory), removed here when the process stops or is killed.
        self._temp = Path(tempfile.mkdtemp(prefix=".lousho-lake-sql-", dir=Path(target.data_path).parent)) \
            if read_only else None
        try:
            self._proc = subprocess.Popen([lake_python(python), "-I", str(WORKER)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, env=env)
        except OSError as e:
            self._remove_files()
            raise LakeUnavailable(f"the lake's process did not start: {e}") from e
        try:
            opened = self._request({"op": "open", "catalog": attach, "data_path": target.data_path,
                                    "read_only": read_only, "memory_limit": memory_limit,
                                    "temp_directory": str(self._temp) if self._temp else None},
                                   deadline_s=open_timeout_s)
        except BaseException:
            self._proc.kill()
            self.close()
            raise
        self.version = int(opened["version"])
        if self.version > lake_schema.LAKE_SCHEMA_VERSION:
            self.close()
            raise LakeFailed(f"the lake's schema version {self.version} is newer than this lousho's "
                             f"{lake_schema.LAKE_SCHEMA_VERSION}", hint="upgrade lousho on this machine")

    def migrate(self) -> int:
        self.version = int(self._request({"op": "migrate", "migrations": lake_schema.migrations()})["version"])
        return self.version

    def position(self, daemon: str) -> int:
        return int(self._request({"op": "position", "daemon": daemon})["position"])

    def commit(self, daemon: str, after: int, position: int, tables: dict[str, pa.Table]) -> int:
        """Insert ``tables`` (span_batch, score_batch, resource_batch), the rows past ``after`` up to ``position``,
        and record ``position`` for ``daemon``, in one lake transaction; returns the span rows inserted (0 when
        the position was committed before). A batch that does not start at the lake's position is refused."""
        payload = b"".join(_named(name, table) for name, table in tables.items() if table.num_rows)
        answer = self._request({"op": "commit", "daemon": daemon, "after": after, "position": position,
                                "inserts": [list(i) for i in lake_schema.INSERTS]}, payload)
        return int(answer["rows"])

    def query(self, sql: str, params: list[Any] | None = None, *, timeout_s: float = 30.0,
              max_rows: int = 1 << 62, max_bytes: int | None = None) -> tuple[pa.Table, bool]:
        """The answer and whether it was cut at ``max_rows``; past ``max_bytes`` of Arrow data the worker stops
        reading it and the call fails (``LakeFailed`` of kind ``AnswerTooLarge``)."""
        # The worker interrupts the query at ``timeout_s``, but an interrupt does not end a wait in libpq (a catalog
        # that stopped answering): past the grace the process is killed, and the next query starts another.
        answer, payload = self._exchange({"op": "query", "sql": sql, "params": params, "timeout_s": timeout_s,
                                          "max_rows": max_rows, "max_bytes": max_bytes},
                                         deadline_s=timeout_s + QUERY_GRACE_S)
        self._check(answer)
        return pa.ipc.open_stream(payload).read_all(), bool(answer.get("truncated"))

    @property
    def usable(self) -> bool:
        """Whether the process is still there to take a request (not stopped by a deadline, not exited, its database
        not invalidated)."""
        return not self._killed and not self.broken and self._proc.poll() is None

    def fence(self) -> tuple[list[LakeFunction], list[str]]:
        """The lake DuckDB's functions and attached databases, for the statement check of its queries (asked
        once per process: they change only with the lake's environment)."""
        if self._fence is None:
            answer = self._request({"op": "fence"}, deadline_s=FENCE_TIMEOUT_S)
            self._fence = ([LakeFunction(str(n), bool(t), bool(v)) for n, t, v in answer["functions"]],
                           [str(d) for d in answer["databases"]])
        return self._fence

    def upkeep(self, older_than_s: float) -> dict[str, Any]:
        return self._request({"op": "upkeep", "older_than_s": older_than_s})

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._remove_files()

    def kill(self) -> None:
        """End the lake's process now: a request waiting on it fails (a shutdown that cannot wait for the lake)."""
        try:
            self._proc.kill()
        except OSError:
            pass
        if self._temp is not None:  # a killed process leaves its spills: they go with it
            shutil.rmtree(self._temp, ignore_errors=True)

    def _remove_files(self) -> None:
        remove_passfile(self._passfile)
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)

    def __enter__(self) -> LakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, header: dict[str, Any], payload: bytes = b"", deadline_s: float | None = None) -> dict[str, Any]:
        answer, _ = self._exchange(header, payload, deadline_s)
        return self._check(answer)

    def _exchange(self, header: dict[str, Any], payload: bytes = b"",
                  deadline_s: float | None = None) -> tuple[dict[str, Any], bytes]:
        """One request and its answer; with ``deadline_s``, a process that has not answered by then is killed
        (``LakeUnavailable``): this client is then done, and its owner starts another."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            self.kill()

        timer = threading.Timer(deadline_s, kill) if deadline_s is not None else None
        late = LakeUnavailable(f"the lake did not answer within {deadline_s or 0:g} s; its process was stopped")
        with self._lock:
            if timer is not None:
                timer.daemon = True
                timer.start()
            try:
                write_frame(self._proc.stdin, header, payload)  # type: ignore[arg-type]
                frame = read_frame(self._proc.stdout)  # type: ignore[arg-type]
            except (OSError, EOFError) as e:
                if killed.is_set():
                    raise late from None
                raise LakeUnavailable(f"the lake's process stopped: {e}") from e
            finally:
                if timer is not None:
                    timer.cancel()
        if killed.is_set():
            self._killed = True  # even with the answer in: the process is gone
            if frame is None:
                raise late
        if frame is None:
            raise LakeUnavailable(f"the lake's process stopped (exit {self._proc.poll()})")
        return frame

    def _check(self, answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("ok"):
            return answer
        # Decided by the error's class the worker reports (DuckDB's IOException for an unreachable catalog or
        # data file), never by its text: a query's own error('no connection') is the query's failure.
        error, kind = str(answer.get("error")), str(answer.get("kind"))
        if kind in OUTAGE_KINDS:
            raise LakeUnavailable(f"the lake: {error}")
        self.broken = self.broken or kind in BROKEN_KINDS
        failed = LakeFailed(f"the lake refused the request: {error}")
        failed.kind = kind
        raise failed


def _named(name: str, table: pa.Table) -> bytes:
    data, encoded = ipc_bytes(table), name.encode()
    return len(encoded).to_bytes(4, "little") + encoded + len(data).to_bytes(4, "little") + data
