"""Fixtures for the recover tests: one store fixture over every backend, real files, real child processes.

``store_url`` is the one parametrised fixture: the Postgres store joins by adding its param (and a
test-started server); every test that takes ``store`` or ``open_more`` then runs against it too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lousho.recover.store import RunStore
from lousho.recover.store import open as open_store

BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"  # tmp_path is absolute: sqlite:////tmp/...
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
