"""A run that kills the process running it (an OOM, a segfault in a tool, a native crash): real ``lousho recover``
processes, each SIGKILLed by the run they resume. The attempts that died count as failures in a row, so the run is
quarantined at the cap instead of killing every loop that picks it up, for ever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from recover_support import run_child

from lousho.recover import durable
from lousho.recover.errors import CRASHED_CODE
from lousho.recover.lease import ORPHAN_SECONDS
from lousho.recover.loop import RecoveryLoop
from lousho.recover.store import RunStore

POISON_APP = '''
import os, signal
from lousho.recover import durable
from lousho.recover.store import open as open_store


def resume(run_id, epoch):
    store = open_store(os.environ["LEDGER_STORE"])
    durable.resume(store, run_id, epoch=epoch)  # the attempt begins (status running) ...
    with open(os.environ["LEDGER_FILE"], "a") as f:
        f.write(f"{run_id} {os.getpid()}\\n")
    os.kill(os.getpid(), signal.SIGKILL)  # ... and its process dies before the run records an ending
'''

MAX_ATTEMPTS = 3
LEASE_SECONDS = 0.3


def _loop_process(tmp_path: Path, store_url: str) -> subprocess.Popen[str]:
    code = "from lousho.recover.cli import recover_command; recover_command(prog_name='lousho recover')"
    env = {"LEDGER_STORE": store_url, "LEDGER_FILE": str(tmp_path / "ledger.txt"), "PATH": "/usr/bin:/bin",
           **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
    return subprocess.Popen(
        [sys.executable, "-c", code, "--app", "poison_app:resume", "--store", store_url, "--interval", "0.05",
         "--max-attempts", str(MAX_ATTEMPTS), "--lease-seconds", str(LEASE_SECONDS)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_run_that_kills_every_loop_running_it_is_quarantined_at_the_cap(
    store: RunStore, store_url: str, tmp_path: Path,
):
    (tmp_path / "poison_app.py").write_text(POISON_APP)
    with durable.start(store, "poison", "coder", "send", {"task": "poison"}) as run:
        run.step("read", lambda: 1)
        run.fail(ConnectionError("reset"))  # an ordinary interrupted run, one failure in a row

    killed = 0
    for _ in range(MAX_ATTEMPTS + 3):  # before the fix every one of these loops was killed
        child = _loop_process(tmp_path, store_url)
        try:
            deadline = time.monotonic() + 30
            while child.poll() is None and time.monotonic() < deadline:
                record = store.get_run("poison")
                if record is not None and record.status == "quarantined":
                    break
                time.sleep(0.02)
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            code = child.wait(timeout=30)
            assert child.stderr is not None
            stderr = child.stderr.read()
            child.stderr.close()
        if code == -signal.SIGKILL:
            killed += 1
            time.sleep(LEASE_SECONDS + 0.1)  # the dead loop's lease lapses
            continue
        assert code == 0, stderr
        break

    record = store.get_run("poison")
    assert record is not None
    assert record.status == "quarantined", (killed, record)
    # 1 failure before, then each claim of a run an attempt left "running" counts one: the cap is reached after
    # MAX_ATTEMPTS - 1 attempts died, and the next loop quarantines it instead of running it.
    assert killed == MAX_ATTEMPTS - 1
    assert len((tmp_path / "ledger.txt").read_text().splitlines()) == killed
    assert record.consecutive_failures == MAX_ATTEMPTS
    assert record.last_error is not None and record.last_error["code"] == CRASHED_CODE
    assert record.last_error["retryable"] is True


KILLED_HOLDER = '''
import os, signal, sys
from lousho.recover import durable, lease
from lousho.recover.store import open as open_store

store = open_store(sys.argv[1])
run = durable.start(store, "held", "coder", "send", {"task": "held"})
with lease.hold(store, run, seconds=0.3):
    run.step("read", lambda: 1)
    os.kill(os.getpid(), signal.SIGKILL)  # a `lousho agent run` killed mid-run, its lease held
'''


def test_a_crashed_run_a_stopping_loop_hands_back_unstarted_is_claimable_at_once(
    store: RunStore, store_url: str, tmp_path: Path,
):
    script = tmp_path / "killed_holder.py"
    script.write_text(KILLED_HOLDER)
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    died = subprocess.run([sys.executable, str(script), store_url], capture_output=True, text=True, timeout=60,
                          env=env)
    assert died.returncode == -signal.SIGKILL, died.stderr
    time.sleep(0.4)  # its lease lapses

    stopping = threading.Event()
    stopping.set()  # a loop told to stop as it claimed: it gives the run back without starting it
    report = RecoveryLoop(store, lambda run_id, epoch: None, stop_event=stopping).tick()
    assert report.attempted == []
    now = datetime.now(UTC)
    # Another replica takes it at once, not orphan_seconds (15 minutes) later.
    taken = store.claim_run("held", owner="replica-2", lease_seconds=60, now=now,
                            orphan_before=now - timedelta(seconds=ORPHAN_SECONDS))
    assert taken is not None and taken.lease_owner == "replica-2"
    assert taken.consecutive_failures == 1 and taken.last_error["code"] == CRASHED_CODE  # counted once


def test_a_run_whose_approver_died_before_resuming_it_is_finished_by_the_loop_after_the_grace(
    store: RunStore, store_url: str, tmp_path: Path,
):
    """`lousho runs approve` resolves, then resumes: a process that died in between left the run awaiting approval
    with nothing pending, which no loop ever claimed. It is claimable once orphan_seconds passed since the decision
    (not before: the approver's own resume must not be raced)."""
    with durable.start(store, "paused", "coder", "send", {"task": "wire"}) as run:
        run.step("plan", lambda: "wire 10")
        run.await_approval(tool_call_id="c1", tool_name="wire", args={"amount": 10}, approval_id="a1")
    (tmp_path / "go").touch()
    resolved = run_child("resolve", store_url, str(tmp_path / "go"), "a1")  # a real process decides, then is gone
    assert resolved.returncode == 0 and '"won": ["a1"]' in resolved.stdout, resolved.stderr

    def app(run_id: str, epoch: int) -> None:
        with durable.resume(store, run_id, epoch=epoch) as resumed:
            decision = store.get_approval("a1")
            assert decision is not None
            resumed.step("plan", lambda: "wire 10")  # recorded: replayed, not run
            resumed.step("wire", lambda: decision.status)
            resumed.finish(decision.status)

    assert RecoveryLoop(store, app).tick().attempted == []  # within the grace: the approver may be on its way
    later = datetime.now(UTC) + timedelta(seconds=ORPHAN_SECONDS + 1)
    report = RecoveryLoop(store, app, clock=lambda: later).tick()
    assert report.attempted == ["paused"]
    record = store.get_run("paused")
    assert record is not None and (record.status, record.output) == ("finished", "approved")
    assert record.consecutive_failures == 0  # a pause is not a crash
    assert [s.name for s in store.load_steps("paused").values()] == ["plan", "wire"]


def test_a_run_with_a_pending_approval_is_never_claimed(store: RunStore):
    with durable.start(store, "waiting", "coder", "send", {}) as run:
        run.await_approval(tool_call_id="c1", tool_name="wire", args={}, approval_id="a1")
    later = datetime.now(UTC) + timedelta(seconds=ORPHAN_SECONDS + 1)
    assert RecoveryLoop(store, lambda run_id, epoch: None, clock=lambda: later).tick().attempted == []
    assert store.get_run("waiting").status == "awaiting_approval"
