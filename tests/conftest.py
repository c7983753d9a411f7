"""Shared fixtures: a real daemon on free loopback ports and a plain HTTP client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lousho.observe.process import DaemonProcess, start_daemon

# No autouse random.seed here: the OTel SDK draws trace and span ids from the global `random`, so
# reseeding it per test makes each test send the previous test's ids, which the daemon rightly
# stores once. Tests that need reproducible randomness use their own random.Random(seed).


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    process = start_daemon(tmp_path / "observe.duckdb")
    try:
        yield process
    finally:
        assert process.stop() == 0, "\n".join(process.output[-30:])


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One daemon for a module whose tests write disjoint traces."""
    process = start_daemon(tmp_path_factory.mktemp("shared") / "observe.duckdb")
    try:
        yield process
    finally:
        assert process.stop() == 0, "\n".join(process.output[-30:])
