"""Fixtures for the recover tests: one store fixture over every backend, real files, real child processes.

``store_url`` is the one parametrised fixture: every test that takes it (or ``store``, ``open_more``) runs against
SQLite (a file in tmp_path) and Postgres (a fresh schema on one server per session, started by the tests:
pg_support.py). The server starts on first use, so ``-k sqlite`` never starts it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_support import PgServer, postgres_server

from lousho.recover.store import RunStore
from lousho.recover.store import open as open_store

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One throwaway Postgres for the session (initdb costs seconds; a schema per test costs milliseconds)."""
    with postgres_server() as server:
        yield server


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"  # tmp_path is absolute: sqlite:////tmp/...
    elif request.param == "postgres":
        server: PgServer = request.getfixturevalue("pg_server")
        with server.fresh_schema() as url:
            yield url
    else:
        raise AssertionError(f"no fixture for backend {request.param}")


@pytest.fixture
def open_more(store_url: str) -> Iterator[Callable[..., RunStore]]:
    """Open more stores on the same URL (other settings, or a second 'process' view); closed at teardown."""
    opened: list[RunStore] = []

    def open_one(**options: Any) -> RunStore:
        store = open_store(store_url, **options)
        opened.append(store)
        return store

    try:
        yield open_one
    finally:
        for store in opened:
            store.close()


@pytest.fixture
def store(open_more: Callable[..., RunStore]) -> RunStore:
    return open_more()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """Postgres-only tests: the URL of a fresh, empty schema on the session's server."""
    with pg_server.fresh_schema() as url:
        yield url
