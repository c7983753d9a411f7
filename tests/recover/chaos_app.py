"""The app of test_chaos_postgres.py, run by ``lousho recover --app tests.recover.chaos_app:App``.

``resume(run_id, epoch)`` opens the run at the loop's epoch and runs its steps (``input["steps"]`` of them, named
``step-<i>``); the recorded ones replay without running. Every side effect appends one line to this process's
ledger, ``$CHAOS_LEDGER_DIR/<pid>.txt``, with ``os.write`` on an ``O_APPEND`` descriptor: the line is in the
kernel's page cache when the call returns, so a SIGKILL right after it loses nothing. A line is
``kind run_id step pid epoch time`` (``time.time()``), kind one of:

- ``begin``: the run was opened (after ``durable.resume`` returned);
- ``step``: step ``step``'s side effect, written inside its function (before its checkpoint commits);
- ``finishing`` / ``finished``: just before and just after ``run.finish`` committed.
"""

from __future__ import annotations

import os
import time

from lousho.recover import durable
from lousho.recover.store import RunStore
from lousho.recover.store import open as open_store

STEP_SECONDS = 0.003


class App:
    def __init__(self) -> None:
        self.url: str | None = None
        self.store: RunStore | None = None
        self._fd = -1

    def use_store_url(self, url: str) -> None:  # called by ``lousho recover`` with its --store
        self.url = url

    def _ledger(self, kind: str, run_id: str, step: int, epoch: int) -> None:
        if self._fd < 0:
            path = os.path.join(os.environ["CHAOS_LEDGER_DIR"], f"{os.getpid()}.txt")
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, f"{kind} {run_id} {step} {os.getpid()} {epoch} {time.time():.6f}\n".encode())

    def resume(self, run_id: str, epoch: int) -> None:
        if self.store is None:
            assert self.url is not None, "lousho recover calls use_store_url first"
            self.store = open_store(self.url)
        with durable.resume(self.store, run_id, epoch=epoch) as run:
            self._ledger("begin", run_id, -1, epoch)
            for index in range(run.input["steps"]):
                def effect(index: int = index) -> int:
                    time.sleep(STEP_SECONDS)
                    self._ledger("step", run_id, index, epoch)
                    return index
                assert run.step(f"step-{index}", effect) == index
            self._ledger("finishing", run_id, -1, epoch)
            run.finish({"steps": run.input["steps"]})
            self._ledger("finished", run_id, -1, epoch)
