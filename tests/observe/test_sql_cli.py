"""``lousho sql`` says when the daemon's row cap cut a result short, and fails unless told not to."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CAP = 1_000_000  # DaemonConfig.sql_max_rows
QUERY = f"SELECT range AS n FROM range({CAP + 5})"


def _lousho_sql(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", "sql", "--url", url, *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.system
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["--csv", "--json"])
def test_truncated_result_warns_and_exits_non_zero(shared_daemon, fmt):
    done = _lousho_sql(shared_daemon.url, fmt, QUERY)
    assert done.returncode == 1
    assert "LOUSHO_SQL_TRUNCATED" in done.stderr and f"first {CAP} rows" in done.stderr
    assert "Traceback" not in done.stderr
    # The rows it has still print, so a pipeline can choose to use them.
    count = len(done.stdout.splitlines()) - 1 if fmt == "--csv" else len(json.loads(done.stdout))
    assert count == CAP


@pytest.mark.system
@pytest.mark.slow
def test_allow_truncated_keeps_the_warning_and_exits_zero(shared_daemon):
    done = _lousho_sql(shared_daemon.url, "--csv", "--allow-truncated", QUERY)
    assert done.returncode == 0
    assert "LOUSHO_SQL_TRUNCATED" in done.stderr
    assert len(done.stdout.splitlines()) == CAP + 1


@pytest.mark.system
def test_a_whole_result_prints_without_a_warning(shared_daemon):
    done = _lousho_sql(shared_daemon.url, "--csv", "SELECT range AS n FROM range(3)")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines() == ["n", "0", "1", "2"]
