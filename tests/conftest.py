"""Shared fixtures: a real daemon on free loopback ports and a plain HTTP client."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lousho.observe.client.process import DaemonProcess, start_daemon


def _hypothesis_draws_no_constants_of_loaded_modules() -> None:
    """Derandomized property tests must draw the same examples whatever ran before them in the process.

    Hypothesis mixes into its draws constants read from the source of every non-site-packages module in
    ``sys.modules`` when a test first draws, and caches them for the process: under ``pytest -n`` a test
    file's examples (and the coverage its test asserts) then depended on which files its worker ran first.
    No local constants: the draws depend on the test alone (its fixed seed), as ``derandomize`` intends.
    """
    from hypothesis.internal.conjecture import providers

    if hasattr(providers, "_get_local_constants") and hasattr(providers, "Constants"):
        providers._get_local_constants = lambda: providers.Constants()


_hypothesis_draws_no_constants_of_loaded_modules()

# The longest test files, longest first (per-file totals of `pytest --durations=0`, 2 Dec 2026). `make test`
# hands whole files to two workers (--dist loadfile) in collection order: a 90 s file handed out last runs alone
# while the other worker idles; handed out first, the short files fill in around it and the workers end together.
LONGEST_FIRST = (
    "bench/test_heal.py", "test_docs_run.py", "plot/test_plot.py", "analysis/test_interval_coverage.py",
    "analysis/test_clustered_monitor.py", "observe/test_trigger_cusum.py",
    "analysis/test_outage_windows.py", "examples/test_openai_agent.py",
    "test_demo.py", "observe/test_fuzz.py", "observe/test_decode_check.py", "recover/test_chaos_postgres.py",
    "observe/test_genai_revisions.py", "observe/test_native_decode.py", "analysis/test_tables.py",
    "lake/test_lake_commits.py", "lake/test_lake_fleet.py", "examples/test_fleet_demo.py", "lake/test_lake_trigger.py",
    # Long only for making the demo (demo_run): by its turn plot/test_plot.py has made it.
    "page/test_page_browser.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    here = Path(__file__).parent
    # A stable sort: the other files keep their order.
    items.sort(key=lambda item: rank.get(item.path.relative_to(here).as_posix(), len(rank)))

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


@dataclass(frozen=True)
class DemoRun:
    """What `make demo` leaves behind (observe.duckdb, runs.db, agent/ with its .lousho/ loop state) and
    what it printed. Made once per session: the demo test, the page, the plots and the notebooks share it."""

    dir: Path
    stdout: str


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """Made once for the whole run, not once per worker: under ``pytest -n`` the workers' temporary directories
    share a parent, and the first worker to need the demo makes it there under a lock (about 20 s of CPU each
    time). Every test reads it; one that writes works on a copy."""
    import fcntl
    import os
    import subprocess
    import sys

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    workdir, printed = root / "demo-run" / "demo", root / "demo-run" / "stdout.txt"
    with open(root / "demo-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not printed.exists():
            workdir.parent.mkdir(exist_ok=True)
            result = subprocess.run([sys.executable, "-m", "lousho", "demo", "--dir", str(workdir), "--runs", "200"],
                                    capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
            printed.write_text(result.stdout)  # last: its presence says the demo is whole
    return DemoRun(workdir, printed.read_text())
