"""``lousho recover`` (two real processes on one store, stopped by signals) and what ``lousho runs pending`` and
``lousho runs outage`` show of the loop: quarantined runs, healing originals, the outage state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_loop_support import interrupted_run

from lousho.recover.cli import load_app, outage, pending
from lousho.recover.errors import AppInvalid
from lousho.recover.store import open as open_store

LEDGER_APP = '''
import os, time
from lousho.recover import durable
from lousho.recover.store import open as open_store

_store = None


def resume(run_id, epoch):
    """Each execution leaves a start and an end line in the ledger: a file outside the store."""
    global _store
    _store = _store or open_store(os.environ["LEDGER_STORE"])
    with durable.resume(_store, run_id, epoch=epoch) as run:
        with open(os.environ["LEDGER_FILE"], "a") as f:
            f.write(f"start {run_id} {os.getpid()} {time.time()}\\n")
        time.sleep(0.02)
        with open(os.environ["LEDGER_FILE"], "a") as f:
            f.write(f"end {run_id} {os.getpid()} {time.time()}\\n")
        run.finish("ok")
'''


def recover_process(tmp_path: Path, store_url: str, *args: str, log: Path | None = None) -> subprocess.Popen[str]:
    """``lousho recover`` in a child; with ``log``, its stderr goes to that file (readable while it runs)."""
    code = "from lousho.recover.cli import recover_command; recover_command(prog_name='lousho recover')"
    env = {"LEDGER_STORE": store_url, "LEDGER_FILE": str(tmp_path / "ledger.txt"), "PATH": "/usr/bin:/bin",
           **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}  # the lousho under test, not another
    stderr = log.open("w") if log is not None else subprocess.PIPE
    try:
        return subprocess.Popen([sys.executable, "-c", code, "--app", "ledger_app:resume", "--store", store_url,
                                 *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    finally:
        if log is not None:
            stderr.close()


def wait_ready(child: subprocess.Popen[str], log: Path, timeout: float = 60.0) -> None:
    """Until the loop runs with its signal handlers installed: a child signalled while still importing
    would die of the signal's default action instead of draining."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.poll() is None and "recovering runs of" not in log.read_text():
        time.sleep(0.05)


@pytest.mark.slow
def test_two_recover_processes_finish_every_run_once_and_exit_0_on_sigterm_and_sigint(tmp_path: Path):
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    (tmp_path / "ledger_app.py").write_text(LEDGER_APP)
    store = open_store(store_url)
    try:
        for i in range(30):
            interrupted_run(store, f"r{i:02d}")
        logs = [tmp_path / f"recover-{n}.log" for n in range(2)]
        children = [recover_process(tmp_path, store_url, "--interval", "0.2", log=log) for log in logs]
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and {r.status for r in store.list_runs()} != {"finished"}:
                time.sleep(0.1)
            for child, sig, log in zip(children, (signal.SIGTERM, signal.SIGINT), logs, strict=True):
                wait_ready(child, log)
                child.send_signal(sig)
            outputs = [(child.communicate(timeout=60)[0], log.read_text())
                       for child, log in zip(children, logs, strict=True)]
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        assert [child.returncode for child in children] == [0, 0], outputs
        assert {r.status for r in store.list_runs()} == {"finished"}
    finally:
        store.close()
    lines = [line.split() for line in (tmp_path / "ledger.txt").read_text().splitlines()]
    assert Counter(run for kind, run, _pid, _t in lines if kind == "start") == {f"r{i:02d}": 1 for i in range(30)}
    logged = "".join(err for _out, err in outputs)
    assert logged.count("on_recovered run=") == 30 and "stopped" in logged  # each callback logged
    assert "received SIGTERM" in outputs[0][1] and "received SIGINT" in outputs[1][1]


@pytest.mark.slow
def test_a_second_signal_exits_at_once_and_leaves_the_run_in_hand_to_its_lease(tmp_path: Path):
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    (tmp_path / "ledger_app.py").write_text(LEDGER_APP.replace("time.sleep(0.02)", "time.sleep(600)"))
    store = open_store(store_url)
    try:
        interrupted_run(store, "long")
        child = recover_process(tmp_path, store_url, "--interval", "0.1")
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and store.get_run("long").status != "running":
                time.sleep(0.05)
            child.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert child.poll() is None  # the first signal waits for the run in hand
            child.send_signal(signal.SIGTERM)
            _out, err = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == -signal.SIGTERM and "exiting without finishing" in err
        run = store.get_run("long")
        assert run.status == "running" and run.lease_owner.startswith("recover@")  # another replica's, once it lapses
    finally:
        store.close()


def test_load_app_accepts_an_object_a_function_or_a_class_and_names_what_is_wrong(tmp_path: Path, monkeypatch):
    (tmp_path / "apps_mod.py").write_text(textwrap.dedent("""
        class App:
            def resume(self, run_id, epoch):
                return ("class", run_id, epoch)

        app = App()

        def resume(run_id, epoch):
            return ("function", run_id, epoch)

        nothing = 42
    """))
    monkeypatch.chdir(tmp_path)
    assert load_app("apps_mod:app").resume("r", 1) == ("class", "r", 1)
    assert load_app("apps_mod:App").resume("r", 2) == ("class", "r", 2)
    assert load_app("apps_mod:resume")("r", 3) == ("function", "r", 3)
    for spec, reason in (("apps_mod", "expected MODULE:OBJ"), ("no_such_module:app", "cannot import"),
                         ("apps_mod:missing", "has no missing"), ("apps_mod:nothing", "not callable")):
        with pytest.raises(AppInvalid) as info:
            load_app(spec)
        assert reason in info.value.message and info.value.code == "LOUSHO_RECOVER_APP_INVALID"


def test_pending_shows_quarantined_runs_healing_originals_and_the_outage(store, store_url: str):
    interrupted_run(store, "stuck", failures=10)
    store.update_run("stuck", status="quarantined")
    interrupted_run(store, "origin", steps=1, failures=10)
    store.fork("origin", 1, "origin.heal", note="why")
    now = datetime.now(UTC)
    error = {"message": "HTTP 503", "code": "LOUSHO_PROVIDER_UNKNOWN", "category": "unknown", "retryable": True}
    for _ in range(3):
        store.record_outcome(provider_failure=True, now=now, threshold=3, first_probe_at=now + timedelta(seconds=30),
                             error=error)
    store.reserve_probe(owner="loop-a", now=now + timedelta(seconds=30), expiry=now + timedelta(seconds=90))

    table = CliRunner().invoke(pending, ["--store", store_url], catch_exceptions=False).output
    assert "provider outage: recovery paused since" in table and "LOUSHO_PROVIDER_UNKNOWN" in table
    assert "probe held by loop-a" in table
    assert "QUARANTINED" in table and "1 quarantined" in table and "lousho runs resume stuck" in table
    assert "(healing)" in table
    rows = json.loads(CliRunner().invoke(pending, ["--store", store_url, "--json"]).output)
    assert [(r["run_id"], r["quarantined"]) for r in rows] == [("stuck", True), ("origin", False),
                                                               ("origin.heal", False)]
    state = json.loads(CliRunner().invoke(outage, ["--store", store_url, "--json"]).output)
    assert (state["paused"], state["failures_in_a_row"], state["probe_owner"]) == (True, 3, "loop-a")
    store.record_outcome(provider_failure=False, now=now, threshold=3, first_probe_at=now)
    line = CliRunner().invoke(outage, ["--store", store_url]).output
    assert line.startswith("provider: no outage")
