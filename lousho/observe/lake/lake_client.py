"""The daemon's side of the lake: the lake's process (lake_worker.py) started in its own environment, and its
requests (open, migrate, position, commit, query, upkeep) as methods.

Catalogs: a Postgres URL (``postgresql://user:password@host:port/db``: many daemons write at once) or a file path
(DuckLake's DuckDB catalog: one writer at a time, for a single machine). The Postgres password goes to the lake's
process in its environment, never in the ``ATTACH`` text a query could read back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from lousho.observe.errors import LakeFailed, LakeUnavailable
from lousho.observe.lake import lake_schema
from lousho.observe.lake.lake_worker import ipc_bytes, read_frame, write_frame

PYTHON_ENV = "LOUSHO_LAKE_PYTHON"
# Where ``lousho lake setup`` builds the lake's environment by default.
DEFAULT_VENV = Path.home() / ".local" / "share" / "lousho" / "lake-venv"
WORKER = Path(__file__).with_name("lake_worker.py")


@dataclass(frozen=True)
class LakeTarget:
    """Where the lake is: its catalog (a Postgres URL or a DuckLake catalog file) and its data directory."""

    catalog: str
    data_path: str

    def attach(self) -> tuple[str, dict[str, str]]:
        """DuckLake's ATTACH string and the environment that carries the password."""
        parsed = urllib.parse.urlsplit(self.catalog)
        if parsed.scheme in ("postgres", "postgresql"):
            parts = {"dbname": parsed.path.lstrip("/") or "postgres", "host": parsed.hostname or "127.0.0.1",
                     "port": str(parsed.port or 5432), "user": urllib.parse.unquote(parsed.username or "postgres")}
            dsn = " ".join(f"{k}={v}" for k, v in parts.items())
            env = {"PGPASSWORD": urllib.parse.unquote(parsed.password)} if parsed.password else {}
            return f"ducklake:postgres:{dsn}", env
        return f"ducklake:{Path(self.catalog).resolve()}", {}

    def describe(self) -> str:
        """The catalog without its password, for logs and the ready line."""
        parsed = urllib.parse.urlsplit(self.catalog)
        if parsed.password:
            netloc = f"{parsed.username}:***@{parsed.hostname}:{parsed.port}"
            return urllib.parse.urlunsplit(parsed._replace(netloc=netloc))
        return self.catalog


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
                 memory_limit: str | None = None) -> None:
        self.target = target
        attach, env = target.attach()
        Path(target.data_path).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._proc = subprocess.Popen([lake_python(python), "-I", str(WORKER)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, env={**os.environ, **env})
        except OSError as e:
            raise LakeUnavailable(f"the lake's process did not start: {e}") from e
        opened = self._request({"op": "open", "catalog": attach, "data_path": target.data_path,
                                "read_only": read_only, "memory_limit": memory_limit})
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
              max_rows: int = 1 << 62) -> tuple[pa.Table, bool]:
        """The answer and whether it was cut at ``max_rows``."""
        answer, payload = self._exchange({"op": "query", "sql": sql, "params": params, "timeout_s": timeout_s,
                                          "max_rows": max_rows})
        self._check(answer)
        return pa.ipc.open_stream(payload).read_all(), bool(answer.get("truncated"))

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

    def kill(self) -> None:
        """End the lake's process now: a request waiting on it fails (a shutdown that cannot wait for the lake)."""
        try:
            self._proc.kill()
        except OSError:
            pass

    def __enter__(self) -> LakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, header: dict[str, Any], payload: bytes = b"") -> dict[str, Any]:
        answer, _ = self._exchange(header, payload)
        return self._check(answer)

    def _exchange(self, header: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            try:
                write_frame(self._proc.stdin, header, payload)  # type: ignore[arg-type]
                frame = read_frame(self._proc.stdout)  # type: ignore[arg-type]
            except (OSError, EOFError) as e:
                raise LakeUnavailable(f"the lake's process stopped: {e}") from e
        if frame is None:
            raise LakeUnavailable(f"the lake's process stopped (exit {self._proc.poll()})")
        return frame

    @staticmethod
    def _check(answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("ok"):
            return answer
        error, kind = str(answer.get("error")), str(answer.get("kind"))
        if kind in ("IOException", "OSError", "FileNotFoundError") or "connection" in error.lower():
            raise LakeUnavailable(f"the lake: {error}")
        raise LakeFailed(f"the lake refused the request: {error}")


def _named(name: str, table: pa.Table) -> bytes:
    data, encoded = ipc_bytes(table), name.encode()
    return len(encoded).to_bytes(4, "little") + encoded + len(data).to_bytes(4, "little") + data
