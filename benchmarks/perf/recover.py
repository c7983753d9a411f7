"""Recover loop timing: one tick over 100,000 pending runs, and resumes per second with 1 and 4 replicas.

1. Tick: --pending runs (default 100,000) are interrupted; --due-fraction of them (default 1%, spread over the
   table) are due now and the rest are backed off (next_attempt_at in the future, as after a failure): most of a
   real backlog waits out its backoff. One ``RecoveryLoop.tick()`` with a no-op app (it opens each run at the
   loop's epoch and finishes it) does all of the loop's store work: list the due runs, claim each, resume it,
   settle it (read it back, count it into the outage breaker), release it. Timed: the whole tick, and the listing
   alone (``list_due`` over the backlog). Goal: the tick under 1 s (median of --repeats, each on a fresh table).
2. Throughput: --runs runs, all due; 1, 2 and 4 replica processes (--replicas), each ticking until nothing is due;
   resumes per second = runs / (last finish - start signal). SQLite has one writer at a time, so replicas share its
   write throughput rather than add to it; the ratio shows what they cost (or, on Postgres, gain).

SQLite gets a fresh file per measurement under --dir (a real disk, not tmpfs). With --postgres URL (a scratch
database: the script empties the run tables before each measurement) or --start-postgres (a throwaway server, as the
tests start one), Postgres is measured too. Per resume it counts the round trips to the database, and the CPU the
replicas spent themselves, so that a machine whose cores are the limit says so.

    .venv/bin/python benchmarks/perf/recover.py [--postgres URL | --start-postgres] [--json]

--json prints one object: ``tick_s_sqlite``, ``tick_s_postgres`` (when measured), ``resumes_per_s`` by store and
replica count, the load average before and after, and every figure under ``stores``.
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
from contextlib import ExitStack, contextmanager
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


@contextmanager
def counting_round_trips(store: RunStore) -> Iterator[dict[str, int]]:
    """Count what the store sends its database while the block runs. SQLite: statements (BEGIN and COMMIT
    included), through the connection's trace callback. Postgres: the driver's calls, each of which waits for its
    answer: a statement is one round trip, a transaction two more (BEGIN, COMMIT)."""
    counts = {"statements": 0, "transactions": 0, "round_trips": 0}
    if hasattr(store, "_conn"):  # SQLite: no network, so a "round trip" is a call into the library
        def traced(_sql: str) -> None:
            counts["statements"] += 1
            counts["round_trips"] += 1

        store._conn.set_trace_callback(traced)
        try:
            yield counts
        finally:
            store._conn.set_trace_callback(None)
        return
    import psycopg

    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany
    transaction = psycopg.Connection.transaction

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["statements"] += 1
        counts["round_trips"] += 1
        return execute(self, *args, **kwargs)

    def counted_executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        params_seq = list(params_seq)
        counts["statements"] += len(params_seq)
        counts["round_trips"] += 1  # psycopg pipelines executemany
        return executemany(self, query, params_seq, **kwargs)

    def counted_transaction(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["transactions"] += 1
        counts["round_trips"] += 2
        return transaction(self, *args, **kwargs)

    psycopg.Cursor.execute, psycopg.Cursor.executemany = counted_execute, counted_executemany  # type: ignore[method-assign]
    psycopg.Connection.transaction = counted_transaction  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        psycopg.Cursor.execute, psycopg.Cursor.executemany = execute, executemany  # type: ignore[method-assign]
        psycopg.Connection.transaction = transaction  # type: ignore[method-assign]


def one_tick(url: str, pending: int, due_every: int) -> dict[str, Any]:
    now = datetime.now(UTC)
    due = seed(url, pending, due_every, now)
    store = open_store(url)
    try:
        t = time.perf_counter()
        listed = store.list_due(now=now, orphan_before=now - timedelta(minutes=15), limit=pending)
        list_s = time.perf_counter() - t
        assert len(listed) == due, (len(listed), due)
        app = NoopApp(store)
        loop = RecoveryLoop(store, app, RecoverSettings())
        with counting_round_trips(store) as counts:
            t, cpu = time.perf_counter(), time.process_time()
            report = loop.tick()
            tick_s, cpu_s = time.perf_counter() - t, time.process_time() - cpu
        assert len(report.attempted) == due, (len(report.attempted), due)
    finally:
        store.close()
    return {"tick_s": tick_s, "list_s": list_s, "app_s": app.spent, "loop_s": tick_s - app.spent, "due": due,
            "per_resume_ms": tick_s / max(due, 1) * 1000, "loop_per_resume_ms": (tick_s - app.spent) / due * 1000,
            "cpu_s": cpu_s, "round_trips_per_resume": counts["round_trips"] / due,
            "statements_per_resume": counts["statements"] / due}


# --- 2. replicas ---


def _replica(url: str, go: Any, results: Any) -> None:
    store = open_store(url)
    try:
        loop = RecoveryLoop(store, NoopApp(store), RecoverSettings())
        go.wait()
        start, resumed, cpu = time.time(), 0, time.process_time()
        while True:
            attempted = len(loop.tick().attempted)
            resumed += attempted
            now = datetime.now(UTC)
            if not attempted and not store.list_due(now=now, orphan_before=now - timedelta(minutes=15), limit=1):
                break
        results.put((start, time.time(), resumed, time.process_time() - cpu))
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
    resumed = sum(n for _, _, n, _ in spans)
    assert resumed == runs, (resumed, runs)  # each run resumed exactly once across replicas
    wall = max(e for _, e, _, _ in spans) - min(s for s, _, _, _ in spans)
    cpu = sum(c for _, _, _, c in spans)
    # The replicas' own CPU (not the database server's): against wall x CPUs it says how much of the machine they
    # kept busy themselves.
    return {"replicas": replicas, "resumes_per_s": runs / wall, "wall_s": wall,
            "per_replica": sorted(n for _, _, n, _ in spans), "replicas_cpu_s": cpu,
            "replicas_cpu_ms_per_resume": cpu / runs * 1000}


# --- report ---


@contextmanager
def started_postgres() -> Iterator[str]:
    """A throwaway Postgres on loopback, as the tests start one (tests/recover/pg_support.py: fsync off)."""
    sys.path.insert(0, str(REPO / "tests" / "recover"))
    from pg_support import postgres_server

    with postgres_server() as server, server.fresh_schema() as url:
        yield url


def measure(base: str, args: argparse.Namespace, directory: Path, name: str, quiet: bool) -> dict[str, Any]:
    due_every = max(1, round(1 / args.due_fraction))
    ticks = []
    for r in range(args.repeats):
        say(quiet, f"{name}: tick {r + 1}/{args.repeats}: {args.pending:,} pending, 1 in {due_every} due ...")
        with fresh_store_url(base, directory, f"{name}-tick-{r}") as url:
            ticks.append(one_tick(url, args.pending, due_every))
    replicas = []
    for count in args.replicas:
        samples = []
        for r in range(args.repeats):
            say(quiet, f"{name}: {count} replica(s) over {args.runs:,} due runs, {r + 1}/{args.repeats} ...")
            with fresh_store_url(base, directory, f"{name}-replicas-{count}-{r}") as url:
                samples.append(resumes_per_second(url, args.runs, count))
        # The repeat with the median rate stands for all (its other figures go with it); every rate is kept.
        chosen = sorted(samples, key=lambda s: s["resumes_per_s"])[len(samples) // 2]
        replicas.append({**chosen, "resumes_per_s_samples": [s["resumes_per_s"] for s in samples]})

    def median(key: str) -> float:
        return statistics.median(t[key] for t in ticks)

    return {
        "tick": {"pending": args.pending, "due": ticks[0]["due"], "median_tick_s": median("tick_s"),
                 "median_list_s": median("list_s"), "median_loop_s": median("loop_s"),
                 "median_per_resume_ms": median("per_resume_ms"),
                 "median_loop_per_resume_ms": median("loop_per_resume_ms"), "median_cpu_s": median("cpu_s"),
                 "round_trips_per_resume": median("round_trips_per_resume"),
                 "statements_per_resume": median("statements_per_resume"), "samples": ticks},
        "replicas": replicas,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=None, metavar="URL",
                        help="also measure this Postgres (a scratch database: the run tables are emptied)")
    parser.add_argument("--start-postgres", action="store_true",
                        help="also measure a throwaway Postgres started for the run (as the tests start one)")
    parser.add_argument("--no-sqlite", action="store_true", help="measure Postgres only")
    parser.add_argument("--pending", type=int, default=100_000, help="pending runs for the tick")
    parser.add_argument("--due-fraction", type=float, default=0.01, help="of them due now (the rest backed off)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="ticks timed, and replica runs, each on a fresh table (median)")
    parser.add_argument("--runs", type=int, default=2000, help="runs for the replica throughput")
    parser.add_argument("--replicas", type=lambda text: [int(n) for n in text.split(",")], default=[1, 2, 4],
                        help="replica counts to measure, comma-separated (default 1,2,4)")
    parser.add_argument("--dir", type=Path, default=REPO / ".lousho" / "bench", help="where SQLite files go")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    quiet = args.json
    command = shlex.join([os.path.relpath(sys.executable, REPO), os.path.relpath(__file__, REPO), *sys.argv[1:]])
    args.dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    say(quiet, f"load average (1, 5, 15 min) on {os.cpu_count()} CPUs: {load_before}")
    stores: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="recover-") as tmp, ExitStack() as stack:
        if not args.no_sqlite:
            stores["sqlite"] = measure("sqlite:", args, Path(tmp), "sqlite", quiet)
        postgres = args.postgres or (stack.enter_context(started_postgres()) if args.start_postgres else None)
        if postgres:
            stores["postgres"] = measure(postgres, args, Path(tmp), "postgres", quiet)
    doc: dict[str, Any] = {
        "command": command, "cpus": os.cpu_count(), "goals": {"tick_s": TICK_GOAL_S},
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "resumes_per_s": {name: {str(r["replicas"]): r["resumes_per_s"] for r in m["replicas"]}
                          for name, m in stores.items()},
        "stores": stores,
    }
    for name, m in stores.items():
        doc[f"tick_s_{name}"] = m["tick"]["median_tick_s"]
    if args.json:
        print(json.dumps(doc, sort_keys=True, indent=2))
        return
    print(f"\ncommand: {command}")
    print(f"load average before {load_before}, after {tuple(doc['load_average']['after'])}, on {os.cpu_count()} CPUs")
    print("app: opens each run at the loop's epoch and finishes it (no work of its own)")
    for name, m in stores.items():
        t = m["tick"]
        print(f"\n{name}: one tick over {args.pending:,} pending runs, {t['due']:,} due (the rest backed off):")
        print(f"  tick {t['median_tick_s']:.3f} s (median of {args.repeats}): {t['median_tick_s'] / TICK_GOAL_S:.2f}x "
              f"the {TICK_GOAL_S:g} s goal, {'within' if t['median_tick_s'] < TICK_GOAL_S else 'OVER'} it; "
              f"{t['median_per_resume_ms']:.3f} ms per resumed run")
        print(f"  of which the loop's own work (claim, settle; not the app's writes): {t['median_loop_s']:.3f} s; "
              f"{t['median_loop_per_resume_ms']:.3f} ms per run")
        print(f"  per resume: {t['round_trips_per_resume']:.2f} round trips to the database "
              f"({t['statements_per_resume']:.2f} statements); this process's CPU: {t['median_cpu_s']:.3f} s")
        print(f"  listing the due runs alone: {t['median_list_s'] * 1000:.1f} ms")
        for r in m["replicas"]:
            rates = ", ".join(f"{x:,.0f}" for x in r["resumes_per_s_samples"])
            print(f"  {r['replicas']} replica(s): {r['resumes_per_s']:,.0f} resumes/s over {args.runs:,} runs, "
                  f"median of {rates} "
                  f"(per replica: {r['per_replica']}; replicas' CPU {r['replicas_cpu_ms_per_resume']:.2f} ms/resume)")


if __name__ == "__main__":
    main()
