"""`make demo` runs the main job end to end; this runs the same command, as `make demo` does."""

from __future__ import annotations

import re

import pytest


@pytest.mark.system
@pytest.mark.slow
def test_demo_runs_end_to_end_recovers_the_killed_run_and_stops_the_daemon_cleanly(demo_run):
    out = demo_run.stdout  # the session's one demo run (tests/conftest.py), exit code 0
    assert "200 runs of the reference agent" in out
    assert "1 unfinished run" in out and "on_recovered('demo-killed'); status finished" in out
    assert "saved 3 notes" in out
    assert "sum-correct" in out  # failures grouped into cases
    assert "lousho improve: " in out and "error rate" in out  # one improvement step's card, with its error rates
    assert "cycle: applied" in out and "watcher tick: kept" in out  # the loop applies a fix; the monitor keeps it
    assert "watcher tick: rollback" in out and "(the kept edit): True" in out  # planted harm rolled back
    assert "audit: ok" in out
    # An agent with no lousho attribute and no version: two derived revisions, one per system prompt, and cases.
    untagged = out.split("10. an agent that knows nothing of lousho", 1)[1].split("11. lousho sql", 1)[0]
    assert len(set(re.findall(r"auto:[0-9a-f]{16} │ derived │ 8    │ 2 ", untagged))) == 2, untagged
    assert "What is the weather in Faultville? │ 2 " in untagged and "InternalServerError" in untagged
    assert "exit code 0" in out
    # A burst acked from the spool, killed before its load, replayed whole at the restart.
    burst = out.split("13. a burst of 20,000 spans", 1)[1]
    assert "loaded into DuckDB before the kill: 0 spans" in burst
    assert re.search(r"replaying \d+ accepted requests", burst), burst
    assert "the store has 20,000 of the 20,000 spans, each once" in burst
    assert (demo_run.dir / "observe.duckdb").exists()
    assert "http://127.0.0.1:4318/" in out and "/agents/ledger" in out  # it ends with where to look


def header_rows(out: str) -> list[list[str]]:
    """The header lines of each rich table in ``out``: those between its top border and the rule below."""
    tables, current = [], None
    for line in out.splitlines():
        if line.startswith("┏"):
            current = []
        elif line.startswith("┡") and current is not None:
            tables.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return tables


@pytest.mark.system
@pytest.mark.slow
def test_the_demo_prints_tables_with_whole_headers_and_decisions_in_words(demo_run):
    out = demo_run.stdout
    assert "shape: (" not in out and "╞" not in out  # no raw frame
    headers = header_rows(out)
    assert len(headers) >= 5  # pending runs, failed runs, pass rates, cases, the sql answer
    assert all(len(rows) == 1 for rows in headers), headers  # no header folded onto a second line
    assert any("┃ revision " in rows[0] and "┃ pass rate " in rows[0] and "┃ 95% interval " in rows[0]
               for rows in headers)
    assert any("┃ case " in rows[0] and "┃ failed checks " in rows[0] for rows in headers)
    assert "watcher tick: kept: " in out and "the edit passes 20 points more than the base" in out
    assert "drop -" not in out
    assert "│ unscored " in out  # the runs the check cannot score are named, not a blank cell


def test_a_child_that_dies_before_its_run_starts_ends_the_wait_with_what_it_printed(tmp_path):
    import subprocess
    import sys
    import time

    import click

    from lousho.demo.cli import _wait_for_run

    log = tmp_path / "child.stderr"
    with log.open("wb") as err:
        child = subprocess.Popen([sys.executable, "-c", "import sys; print('no module named x', file=sys.stderr); "
                                  "sys.exit(3)"], stdout=subprocess.DEVNULL, stderr=err)
    started = time.monotonic()
    with pytest.raises(click.ClickException) as caught:
        _wait_for_run(f"sqlite:///{tmp_path / 'runs.db'}", "never", child, log, timeout=60)
    assert time.monotonic() - started < 10  # not the 60 s it would wait for a run never made
    assert "exit code 3" in caught.value.message and "no module named x" in caught.value.message


def test_lousho_s_own_children_ignore_a_lousho_folder_in_the_working_directory(tmp_path, monkeypatch):
    from lousho.observe.client.process import start_daemon

    (tmp_path / "lousho" / "observe").mkdir(parents=True)  # e.g. a copy of lousho/agent/example's parents
    monkeypatch.chdir(tmp_path)
    daemon = start_daemon(tmp_path / "o.duckdb")  # python -m lousho.observe found this folder first
    assert daemon.stop() == 0
