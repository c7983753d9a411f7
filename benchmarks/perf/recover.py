"""Recover loop timing: one tick over 100,000 pending runs, and resumes per second with 1 and 4 replicas.

1. Tick: --pending runs (default 100,000) are interrupted; --due-fraction of them (default 1%, spread over the
   table) are due now and the rest are backed off (next_attempt_at in the future, as after a failure): most of a
   real backlog waits out its backoff. One ``RecoveryLoop.tick()`` with a no-op app (it opens each run at the
   loop's epoch and finishes it) does all of the loop's store work: list the due runs, claim each, resume it,
   settle it (read it back, count it into the outage breaker), release it. Timed: the whole tick, and the listing
   alone (``list_due`` over the backlog). Goal: the tick under 1 s (median of --repeats, each on a fresh table).
2. Throughput: --runs runs, all due; 1 and then 4 replica processes, each ticking until nothing is due; resumes per
   second = runs / (last finish - start signal). SQLite has one writer at a time, so replicas share its write
   throughput rather than add to it; the ratio shows what they cost (or, on Postgres, gain).

--store takes any store URL. SQLite (the default) gets a fresh file per measurement under --dir (a real disk, not
tmpfs). A Postgres URL must name a scratch database: the script empties the run tables before each measurement.

    .venv/bin/python benchmarks/perf/recover.py [--store URL] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lousho.recover import durable
from lousho.recover._codec import format_utc
from lousho.recover.loop import RecoverSettings, RecoveryLoop
from lousho.recover.store import RunStore
from lousho.recover.store import open as open_store

REPO = Path(__file__).resolve().parents[2]
TICK_GOAL_S = 1.0
ERROR = json.dumps({"category": None, "code": "LOUSHO_RUN_EXCEPTION", "message": "ConnectionError: reset",
                    "retryable": True}, sort_keys=True)


def say(quiet: bool, *parts: Any) -> None:
    """Progress for a person; on stderr under --json so stdout stays one JSON document."""
    print(*parts, file=sys.stderr if quiet else sys.stdout, flush=True)


# --- the table ---


@contextmanager
def fresh_store_url(base: str, directory: Path, name: str) -> Iterator[str]:
    """A URL whose run tables are empty and migrated: a new SQLite file, or the emptied scratch Postgres."""
    if base.startswith("sqlite:"):
        path = directory / f"{name}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        yield f"sqlite:///{path}"
        return
    open_store(base).close()  # migrate
    _sql(base, lambda cur: [cur.execute(f"DELETE FROM {t}") for t in ("checkpoints", "approvals", "runs")])
    _sql(base, lambda cur: cur.execute("UPDATE recover_outage SET failures = 0, paused_since = NULL, probes = 0, "
                                       "next_probe_at = NULL, probe_owner = NULL, probe_expiry = NULL"))
    yield base


def _sql(url: str, fn: Callable[[Any], object]) -> None:
    """Raw SQL around the store (seeding 100,000 rows one store call at a time would take minutes)."""
    if url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            with conn:
                fn(conn.cursor())
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(url) as conn, conn.cursor() as cur:
        fn(cur)


def seed(url: str, count: int, due_every: int, now: datetime) -> int:
    """``count`` interrupted runs, one in ``due_every`` due now, the rest due in an hour. Returns how many are due."""
    open_store(url).close()  # create and migrate
    later = format_utc(now + timedelta(hours=1))
    created = format_utc(now - timedelta(hours=1))
    rows = [(f"run-{i:06d}", "bench", "send", "interrupted", json.dumps({"i": i}), 1, 1, ERROR,
             None if i % due_every == 0 else later, created, created) for i in range(count)]
    mark = "?" if url.startswith("sqlite:") else "%s"
    sql = ("INSERT INTO runs (id, agent, kind, status, input, attempts, consecutive_failures, last_error, "
           f"next_attempt_at, created_at, updated_at) VALUES ({', '.join([mark] * 11)})")
    _sql(url, lambda cur: cur.executemany(sql, rows))
    if url.startswith("sqlite:"):  # fold the seeding's WAL into the file now, not during the timed tick
        _sql(url, lambda cur: cur.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
    return sum(1 for i in range(count) if i % due_every == 0)


class NoopApp:
    """Opens each run at the loop's epoch and finishes it: the least a resume costs (two writes of the run's own).
    ``spent`` adds up the time inside the app, so the loop's own share of a tick can be told apart."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.spent = 0.0

    def resume(self, run_id: str, epoch: int) -> None:
        t = time.perf_counter()
        durable.resume(self.store, run_id, epoch=epoch).finish(None)
        self.spent += time.perf_counter() - t


# --- 1. one tick ---


def one_tick(url: str, pending: int, due_every: int) -> dict[str, float]:
    now = datetime.now(UTC)
    due = seed(url, pending, due_every, now)
    store = open_store(url)
    try:
        t = time.perf_counter()
        listed = store.list_due(now=now, orphan_before=now - timedelta(minutes=15), limit=pending)
        list_s = time.perf_counter() - t
        assert len(listed) == due, (len(listed), due)
        app = NoopApp(store)
        loop = RecoveryLoop(store, app, RecoverSettings(batch=max(due, 1)))
        t = time.perf_counter()
        report = loop.tick()
        tick_s = time.perf_counter() - t
        assert len(report.attempted) == due, (len(report.attempted), due)
    finally:
        store.close()
    return {"tick_s": tick_s, "list_s": list_s, "app_s": app.spent, "loop_s": tick_s - app.spent, "due": due,
            "per_resume_ms": tick_s / max(due, 1) * 1000, "loop_per_resume_ms": (tick_s - app.spent) / due * 1000}


# --- 2. replicas ---


def _replica(url: str, go: Any, results: Any) -> None:
    store = open_store(url)
    try:
        loop = RecoveryLoop(store, NoopApp(store), RecoverSettings(batch=200))
        go.wait()
        start, resumed = time.time(), 0
        while True:
            attempted = len(loop.tick().attempted)
            resumed += attempted
            now = datetime.now(UTC)
            if not attempted and not store.list_due(now=now, orphan_before=now - timedelta(minutes=15), limit=1):
                break
        results.put((start, time.time(), resumed))
    finally:
        store.close()


def resumes_per_second(url: str, runs: int, replicas: int) -> dict[str, float]:
    seed(url, runs, 1, datetime.now(UTC))
    ctx = mp.get_context("spawn")  # a fresh interpreter per replica, as separate processes would be
    go, results = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=_replica, args=(url, go, results)) for _ in range(replicas)]
    for w in workers:
        w.start()
    time.sleep(1.5)  # let each interpreter import lousho and open the store before the start signal
    go.set()
    spans = [results.get(timeout=600) for _ in workers]
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise RuntimeError(f"replica exited with {w.exitcode}")
    resumed = sum(n for _, _, n in spans)
    assert resumed == runs, (resumed, runs)  # each run resumed exactly once across replicas
    wall = max(e for _, e, _ in spans) - min(s for s, _, _ in spans)
    return {"replicas": replicas, "resumes_per_s": runs / wall, "wall_s": wall,
            "per_replica": sorted(n for _, _, n in spans)}


# --- report ---


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite", help="a store URL (Postgres: a scratch database); "
                        "default: fresh SQLite files under --dir")
    parser.add_argument("--pending", type=int, default=100_000, help="pending runs for the tick")
    parser.add_argument("--due-fraction", type=float, default=0.01, help="of them due now (the rest backed off)")
    parser.add_argument("--repeats", type=int, default=3, help="ticks timed, each on a fresh table (median)")
    parser.add_argument("--runs", type=int, default=2000, help="runs for the replica throughput")
    parser.add_argument("--dir", type=Path, default=REPO / ".lousho" / "bench", help="where SQLite files go")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    quiet = args.json
    command = shlex.join([os.path.relpath(sys.executable, REPO), os.path.relpath(__file__, REPO), *sys.argv[1:]])
    due_every = max(1, round(1 / args.due_fraction))
    args.dir.mkdir(parents=True, exist_ok=True)
    base = "sqlite:" if args.store == "sqlite" else args.store
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="recover-") as tmp:
        ticks = []
        for r in range(args.repeats):
            say(quiet, f"tick {r + 1}/{args.repeats}: {args.pending:,} pending, 1 in {due_every} due ...")
            with fresh_store_url(base, Path(tmp), f"tick-{r}") as url:
                ticks.append(one_tick(url, args.pending, due_every))
        replicas = []
        for count in (1, 4):
            say(quiet, f"{count} replica(s) over {args.runs:,} due runs ...")
            with fresh_store_url(base, Path(tmp), f"replicas-{count}") as url:
                replicas.append(resumes_per_second(url, args.runs, count))
    tick_s = statistics.median(t["tick_s"] for t in ticks)
    list_s = statistics.median(t["list_s"] for t in ticks)
    loop_s = statistics.median(t["loop_s"] for t in ticks)
    doc = {
        "command": command, "store": "sqlite" if base == "sqlite:" else "postgres",
        "goals": {"tick_s": TICK_GOAL_S},
        "tick": {"pending": args.pending, "due": ticks[0]["due"], "median_tick_s": tick_s, "median_list_s": list_s,
                 "median_loop_s": loop_s, "median_per_resume_ms": statistics.median(t["per_resume_ms"] for t in ticks),
                 "median_loop_per_resume_ms": statistics.median(t["loop_per_resume_ms"] for t in ticks),
                 "samples": ticks},
        "replicas": replicas,
        "ratios": {"tick_vs_goal": tick_s / TICK_GOAL_S, "loop_work_vs_goal": loop_s / TICK_GOAL_S,
                   "replicas_4_vs_1": replicas[1]["resumes_per_s"] / replicas[0]["resumes_per_s"]},
    }
    if args.json:
        print(json.dumps(doc, sort_keys=True, indent=2))
        return
    print(f"\ncommand: {command}")
    print(f"store: {doc['store']}; app: opens each run at the loop's epoch and finishes it (no work of its own)\n")
    print(f"one tick over {args.pending:,} pending runs, {ticks[0]['due']:,} due (the rest backed off):")
    print(f"  tick {tick_s:.3f} s (median of {args.repeats}): {tick_s / TICK_GOAL_S:.2f}x the {TICK_GOAL_S:g} s "
          f"goal, {'within' if tick_s < TICK_GOAL_S else 'OVER'} it; "
          f"{doc['tick']['median_per_resume_ms']:.3f} ms per resumed run")
    print(f"  of which the loop's own work (list, claim, settle, release; not the app's writes): {loop_s:.3f} s, "
          f"{loop_s / TICK_GOAL_S:.2f}x the goal; {doc['tick']['median_loop_per_resume_ms']:.3f} ms per run")
    print(f"  listing the due runs alone: {list_s * 1000:.1f} ms")
    for r in replicas:
        print(f"{r['replicas']} replica(s): {r['resumes_per_s']:,.0f} resumes/s over {args.runs:,} runs "
              f"(per replica: {r['per_replica']})")
    print(f"4 replicas vs 1: {doc['ratios']['replicas_4_vs_1']:.2f}x")


if __name__ == "__main__":
    main()
