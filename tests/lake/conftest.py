"""Fixtures for the fleet's lake: one throwaway Postgres (the catalog) per test process, a database per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The Postgres server of the recover tests, and the trigger tests' helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recover"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "observe"))
from pg_support import PgServer, postgres_server  # noqa: E402


@pytest.fixture(scope="session")
def pg_lake_server() -> Iterator[PgServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture
def lake_url(pg_lake_server: PgServer, request: pytest.FixtureRequest) -> str:
    """A new empty database on the module's server: a lake of its own for the test."""
    name = "lake_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[-40:].lower()
    with pg_lake_server.admin() as con:
        con.autocommit = True
        con.execute(f'DROP DATABASE IF EXISTS "{name}"')
        con.execute(f'CREATE DATABASE "{name}"')
    return pg_lake_server.url(name)
