"""Chaos on Postgres: 4 ``lousho recover`` replicas recover 1,000 interrupted runs while the test SIGKILLs replicas
at random (and starts replacements). Every run finishes exactly once, no completed step runs twice, no run is
resumed by two processes at once, and no checkpoint is lost.

The runs' side effects go to a ledger outside the store (chaos_app.py: one file per process, each line written
before the step's checkpoint commits); the checks hold the ledger against the store's ``runs`` and
``checkpoints`` rows and the set of pids the test killed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from recover_support import raw_sql

from lousho.recover import durable
from lousho.recover.store import open as open_store

pytestmark = [pytest.mark.slow, pytest.mark.system]

REPO = Path(__file__).resolve().parents[2]
RUNS = 1000
REPLICAS = 4
KILLS = 6
FINISH_TIMEOUT_S = 180
SEED = 20261129


@dataclass(frozen=True)
class Line:
    kind: str  # begin | step | finishing | finished (chaos_app.py)
    run_id: str
    step: int
    pid: int
    epoch: int
    at: float


class Replicas:
    """``lousho recover`` processes, each with its own log file; every one still alive is killed in ``close``."""

    def __init__(self, url: str, ledger: Path, logs: Path) -> None:
        self.url = url
        self.env = {**os.environ, "CHAOS_LEDGER_DIR": str(ledger)}
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self._files: list[IO[bytes]] = []
        self.killed: set[int] = set()

    def start(self) -> subprocess.Popen[bytes]:
        log = (self.logs / f"replica-{len(self.procs)}.log").open("wb")
        self._files.append(log)
        proc = subprocess.Popen(
            [sys.executable, "-m", "lousho", "recover", "--app", "tests.recover.chaos_app:App", "--store", self.url,
             "--interval", "0.2", "--lease-seconds", "2", "--log-level", "info"],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def running(self, ledger: Path, wait_s: float = 10.0) -> list[subprocess.Popen[bytes]]:
        """The live replicas inside a run now (their ledger's last line is not ``finished``), waiting up to
        ``wait_s`` for one: a kill aimed at a replica still starting, or between two runs, would cut nothing."""
        deadline = time.monotonic() + wait_s
        while True:
            inside = []
            for proc in self.alive():
                path = ledger / f"{proc.pid}.txt"
                last = path.read_text().rstrip("\n").rsplit("\n", 1)[-1] if path.exists() else ""
                if last and not last.startswith("finished "):
                    inside.append(proc)
            if inside or time.monotonic() > deadline:
                return inside
            time.sleep(0.01)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        self.killed.add(proc.pid)

    def died_on_their_own(self) -> list[str]:
        return [self.log_of(p) for p in self.procs if p.poll() is not None and p.pid not in self.killed
                and p.returncode != 0]

    def wait_ready(self, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
        """Until the replica's loop runs (its signal handlers are installed): a replacement started a moment
        ago would otherwise die of SIGTERM's default action before it could drain and exit 0."""
        path = self.logs / f"replica-{self.procs.index(proc)}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None and "recovering runs of" not in path.read_text():
            time.sleep(0.05)

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        index = self.procs.index(proc)
        return f"pid {proc.pid} rc {proc.returncode}:\n" + (self.logs / f"replica-{index}.log").read_text()[-3000:]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
        for log in self._files:
            log.close()


def count_finished(url: str) -> int:
    return raw_sql(url, "SELECT count(*) FROM runs WHERE status = 'finished'")[0][0]


def read_ledger(ledger: Path) -> list[Line]:
    lines = []
    for path in ledger.glob("*.txt"):
        for text in path.read_text().splitlines():
            kind, run_id, step, pid, epoch, at = text.split()
            lines.append(Line(kind, run_id, int(step), int(pid), int(epoch), float(at)))
    return lines


def test_replicas_killed_at_random_recover_every_run_exactly_once(pg_url: str, tmp_path: Path):
    rng = random.Random(SEED)
    plans: dict[str, tuple[int, int]] = {}  # run id -> (steps, recorded before the interruption)
    store = open_store(pg_url)
    try:
        for i in range(RUNS):
            run_id = f"c{i:04d}"
            steps, recorded = rng.choice((3, 4)), rng.choice((1, 2))
            plans[run_id] = (steps, recorded)
            run = durable.start(store, run_id, "chaos", "send", {"steps": steps})
            for index in range(recorded):
                run.step(f"step-{index}", lambda index=index: index)
            run.fail(ConnectionError("the tool's server reset the connection"))
    finally:
        store.close()
    assert raw_sql(pg_url, "SELECT status, count(*) FROM runs GROUP BY status") == [("interrupted", RUNS)]

    ledger, logs = tmp_path / "ledger", tmp_path / "logs"
    ledger.mkdir()
    logs.mkdir()
    replicas = Replicas(pg_url, ledger, logs)
    started = time.monotonic()
    try:
        for _ in range(REPLICAS):
            replicas.start()
        for _ in range(KILLS):
            time.sleep(rng.uniform(1.0, 2.0))
            assert not replicas.died_on_their_own(), replicas.died_on_their_own()
            if count_finished(pg_url) == RUNS:
                break  # nothing left to interrupt
            replicas.kill(rng.choice(replicas.running(ledger) or replicas.alive()))
            replicas.start()
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        while count_finished(pg_url) < RUNS and time.monotonic() < deadline:
            assert not replicas.died_on_their_own(), replicas.died_on_their_own()
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        survivors = replicas.alive()
        for proc in survivors:
            replicas.wait_ready(proc)
            proc.send_signal(signal.SIGTERM)
        for proc in survivors:
            proc.wait(30)
        assert [p.returncode for p in survivors] == [0] * len(survivors), [replicas.log_of(p) for p in survivors]
        assert len(survivors) == REPLICAS
    finally:
        replicas.close()

    killed = replicas.killed
    runs = {run_id: (status, epoch) for run_id, status, epoch in
            raw_sql(pg_url, "SELECT id, status, lease_epoch FROM runs")}
    checkpoints: dict[str, dict[int, int]] = defaultdict(dict)  # run -> step -> epoch of its writer
    for run_id, step, epoch in raw_sql(pg_url, "SELECT run_id, step, epoch FROM checkpoints"):
        checkpoints[run_id][step] = epoch
    lines = read_ledger(ledger)
    by_run: dict[str, list[Line]] = defaultdict(list)
    for line in lines:
        by_run[line.run_id].append(line)

    # every run finished, exactly once
    assert Counter(status for status, _ in runs.values()) == {"finished": RUNS}, f"after {elapsed:.0f} s"
    problems: list[str] = []
    repeated_steps = 0
    cut_executions = 0
    for run_id, (steps, recorded) in plans.items():
        final_epoch = runs[run_id][1]
        mine = by_run[run_id]
        finished = [line for line in mine if line.kind == "finished"]
        finishing = [line for line in mine if line.kind == "finishing" and line.epoch == final_epoch]
        if len(finished) > 1:
            problems.append(f"{run_id}: finished {len(finished)} times: {finished}")
        elif finished and finished[0].epoch != final_epoch:
            problems.append(f"{run_id}: finished at epoch {finished[0].epoch}, the run's epoch is {final_epoch}")
        elif not finished and not (finishing and finishing[0].pid in killed):  # killed between commit and line
            problems.append(f"{run_id}: finished in the store, no finished line: {mine}")

        # no checkpoint lost: a finished run has every step recorded
        if sorted(checkpoints[run_id]) != list(range(steps)):
            problems.append(f"{run_id}: checkpoints {sorted(checkpoints[run_id])} of {steps} steps")
            continue
        # no completed step ran again: a step's side effect repeats only where a killed process ran it and its
        # checkpoint never committed; the committed record is the one line at the checkpoint's epoch
        for step in range(steps):
            effects = [line for line in mine if line.kind == "step" and line.step == step]
            epoch = checkpoints[run_id][step]
            if step < recorded:
                if epoch != 0 or effects:
                    problems.append(f"{run_id}: step {step} recorded before the chaos ran again: {effects}")
                continue
            committed = [line for line in effects if line.epoch == epoch]
            lost = [line for line in effects if line.epoch != epoch]
            if len(committed) != 1:
                problems.append(f"{run_id}: step {step} (checkpoint epoch {epoch}) ran {len(committed)} times "
                                f"at that epoch: {effects}")
            if any(line.pid not in killed or line.epoch > epoch for line in lost):
                problems.append(f"{run_id}: step {step} (checkpoint epoch {epoch}) ran again, not after a kill: "
                                f"{effects}")
            repeated_steps += bool(lost)

        # never two executions at once: each execution (pid, epoch) spans its lines; spans in time order do not
        # overlap, carry rising epochs, and every one but the last was cut short by a kill
        spans: dict[tuple[int, int], list[float]] = {}
        for line in mine:
            span = spans.setdefault((line.pid, line.epoch), [line.at, line.at])
            span[0], span[1] = min(span[0], line.at), max(span[1], line.at)
        ordered = sorted(spans.items(), key=lambda item: item[1][0])
        if len({epoch for (_, epoch), _ in ordered}) != len(ordered):
            problems.append(f"{run_id}: two executions share an epoch: {ordered}")
        for ((pid_a, epoch_a), (_, end_a)), ((pid_b, epoch_b), (start_b, _)) in zip(ordered, ordered[1:],
                                                                                   strict=False):
            if start_b < end_a or epoch_b <= epoch_a:
                problems.append(f"{run_id}: execution {pid_b}@{epoch_b} overlaps or precedes {pid_a}@{epoch_a}: "
                                f"{ordered}")
        for (pid, epoch), _ in ordered[:-1]:
            cut_executions += 1
            if pid not in killed:
                problems.append(f"{run_id}: execution {pid}@{epoch} stopped without being killed: {ordered}")
        if ordered and ordered[-1][0][1] != final_epoch:
            problems.append(f"{run_id}: the last execution {ordered[-1][0]} is not at the run's epoch {final_epoch}")
    assert problems == [], f"{len(problems)} problems, first 20:\n" + "\n".join(problems[:20])
    assert cut_executions > 0, "no kill landed on a run in progress: the chaos tested nothing"
    print(f"chaos: {RUNS} runs finished in {elapsed:.1f} s by {len(replicas.procs)} replicas, {len(killed)} killed; "
          f"{cut_executions} executions cut short, {repeated_steps} step side effects repeated after a kill")
