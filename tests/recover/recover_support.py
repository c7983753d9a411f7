"""Helpers for the recover tests: raw database access around the store, and child processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lousho.recover.store import parse_url

CHILD = Path(__file__).with_name("child_run.py")


def raw_sql(store_url: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Write around the store, as a person (or a bug) with a database shell would."""
    if store_url.startswith("sqlite:"):
        conn = sqlite3.connect(parse_url(store_url).path)
        try:
            with conn:
                conn.execute(sql, params)
        finally:
            conn.close()
        return
    raise AssertionError(f"no raw access for {store_url}")


def run_child(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run tests/recover/child_run.py in a fresh interpreter; its own process, so a SIGKILL kills only it."""
    return subprocess.run([sys.executable, str(CHILD), *args], capture_output=True, text=True, timeout=timeout)


def spawn_child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@contextmanager
def spawned(*commands: tuple[str, ...]) -> Iterator[list[subprocess.Popen[str]]]:
    """Children running at once; any still alive at the end (a failed assertion) is killed and reaped."""
    children = [spawn_child(*command) for command in commands]
    try:
        yield children
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait()
            for pipe in (child.stdout, child.stderr):
                if pipe is not None:
                    pipe.close()
