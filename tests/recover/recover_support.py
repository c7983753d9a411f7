"""Helpers for the recover tests: raw database access around the store, and child processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from lousho.recover.store import parse_url

CHILD = Path(__file__).with_name("child_run.py")
RACE_CHILD = Path(__file__).with_name("race_child.py")


def raw_sql(store_url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read or write around the store, as a person (or a bug) with a database shell would. ``sql`` uses ``?``
    placeholders on every backend; the rows it returns, if any."""
    if store_url.startswith("sqlite:"):
        conn = sqlite3.connect(parse_url(store_url).path)
        try:
            with conn:
                return conn.execute(sql, params).fetchall()
        finally:
            conn.close()
    if store_url.startswith("postgresql:"):
        with psycopg.connect(store_url, autocommit=True) as pg:
            cur = pg.execute(sql.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []
    raise AssertionError(f"no raw access for {store_url}")


def table_names(store_url: str) -> set[str]:
    """The tables and views the store's connection sees (Postgres: those of the first schema on its search path,
    where information_schema.tables lists views too)."""
    if store_url.startswith("sqlite:"):
        return {row[0] for row in raw_sql(store_url, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    return {row[0] for row in raw_sql(
        store_url, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")}


def run_child(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run tests/recover/child_run.py in a fresh interpreter; its own process, so a SIGKILL kills only it."""
    return subprocess.run([sys.executable, str(CHILD), *args], capture_output=True, text=True, timeout=timeout)


def spawn_child(*args: str, child: Path = CHILD) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(child), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@contextmanager
def spawned(*commands: tuple[str, ...], child: Path = CHILD) -> Iterator[list[subprocess.Popen[str]]]:
    """Children running at once; any still alive at the end (a failed assertion) is killed and reaped."""
    children = [spawn_child(*command, child=child) for command in commands]
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
