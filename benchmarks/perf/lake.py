"""The fleet's lake (issue 29): its queries beside one local store's, and the spans/s a fleet commits to it.

Part 1, queries. The query benchmark's store (query.py's generator and cache: ``--runs`` runs, about 10 spans
each) is loaded into a fresh lake (a throwaway Postgres catalog, tests/recover/pg_support.py, and a Parquet data
directory) as three daemons' commits: the runs split three ways by trace, each part committed under its own
daemon name with ``LakeClient.commit`` in batches of about ``--batch-spans`` span rows, oldest first, read from
the local store by the shipper's own SELECTs (lake_shipper.py's, with its commit_seq range swapped for the part's
and the batch's time window). Then every query query.py times (the same callables, so the same SQL texts) plus a
group-by over the spans is timed through a read-only lake client (``lousho.observe.connect(lake=...)``: a
``LakeClient`` opened read-only behind the SQL guard) and on the local store (``connect(path)``, read-only, as
query.py does): median of ``--repeats`` after a warm-up, and their ratio. The local ``runs`` and ``sessions`` are
kept tables; the lake computes them from its spans at query time (lake_schema.py), which is most of the
difference. A query that fails on the lake (its 30 s timeout, an error) is reported with why. Then the lake's
upkeep (``LakeClient.upkeep(0)``: merging small files) is timed and the lake's queries timed again.

Part 2, ingest. For 1, 2 and 3 daemons (``lousho observe --lake ... --lake-every 2``, each on its own store, one
fresh lake a round), sender processes (ingest.py's exporters, ``--clients-per-daemon`` a daemon, as fast as the
acks come) post for ``--warmup`` + ``--window`` seconds. Committed to the lake, per daemon: the span rows of its
commits inside the window, first commit excluded, over the time from its first to its last commit there (the
lake's own ``lousho_lake_positions`` records each commit's rows and time: a slope between commit instants, not a
count cut at an arbitrary moment), summed over the daemons. Committed locally: ``lousho_load_spans_sum`` from
each daemon's /metrics at the window's ends. After the senders stop the daemons stop (each flushes the lake), and
the lake's ``count(*)`` of spans is checked against the local stores' together (every span once). Rounds are
interleaved (1, 2, 3, 1, 2, 3, ...); medians of ``--fleet-repeats`` quoted.

The machine's load (1-minute average) is recorded at the start and end of each part. Not a timed test: run it by
hand. Everything it starts (Postgres, daemons, lake processes, senders) is stopped in ``finally``.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _common as common
import duckdb
import ingest
import query

from lousho.observe import connect
from lousho.observe.client.process import DaemonProcess, start_daemon
from lousho.observe.client.store_client import LakeStoreClient
from lousho.observe.lake import lake_shipper
from lousho.observe.lake.lake_client import PYTHON_ENV, LakeClient, LakeTarget, lake_python
from lousho.observe.lake.lake_query import run_lake_query
from lousho.observe.sql.query import QueryResult
from lousho.observe.store.span_store import open_read_only

sys.path.insert(0, str(common.REPO / "tests" / "recover"))
import pg_support  # noqa: E402  (the tests' throwaway Postgres; tests/ is not a package)

DAEMONS = 3
# The shipper's SELECTs read the rows past the lake's position; here a part's rows in a time window instead.
_RANGE = "commit_seq > $after AND commit_seq <= $upto"
_SPAN_PART = "hash(trace_id) % $parts = $part AND start_ns >= $lo AND start_ns < $hi"
_SCORE_PART = "hash(trace_id) % $parts = $part AND time_ns >= $lo AND time_ns < $hi"
SPAN_SHAPES = [
    query.Timing("s_spans_by_operation", "spans: count, tokens and mean duration by operation (a group-by)",
                 query._sql("SELECT operation, count(*), sum(input_tokens), avg(duration_ns) FROM spans "
                            "GROUP BY ALL")),
]


def load(quiet: bool, label: str) -> float:
    """The 1-minute load average, printed: every figure is read against it."""
    one = os.getloadavg()[0]
    common.say(quiet, f"[{time.strftime('%H:%M:%S', time.gmtime())} UTC] {label}: load {one:.2f}")
    return one


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every live process under it (daemons, lake processes, senders)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    mine, grew = {root}, True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in mine} - mine
        mine |= found
        grew = bool(found)
    return sum(common.proc_cpu_s(pid) or 0.0 for pid in mine)


class Busy:
    """What the rest of the machine did while a figure was taken (others' tests, say): cores busy outside this
    benchmark's processes, and stolen by the hypervisor. The figures are as good as these are small."""

    def __init__(self) -> None:
        self._wall, self._mine, self._machine = time.monotonic(), tree_cpu_s(os.getpid()), common.machine_cpu_s()

    def cores(self) -> dict[str, float]:
        wall = time.monotonic() - self._wall
        mine, machine = tree_cpu_s(os.getpid()) - self._mine, common.machine_cpu_s()
        return {"own_cores": mine / wall,
                "other_cores": max(0.0, (machine["busy"] - self._machine["busy"] - mine) / wall),
                "steal_cores": (machine["steal"] - self._machine["steal"]) / wall}


# --- the lake's catalog ---


@contextmanager
def postgres() -> Iterator[pg_support.PgServer]:
    """One throwaway Postgres for every lake of the run (fsync off, as the tests run it)."""
    with pg_support.postgres_server() as server:
        yield server


def fresh_lake(server: pg_support.PgServer, name: str, root: Path) -> LakeTarget:
    """A new database as the lake's catalog and a new data directory, migrated to the lake's schema."""
    with server.admin() as con:
        con.execute(f"CREATE DATABASE {name}")
    target = LakeTarget(server.url(name), str(root / name))
    with LakeClient(target) as client:
        client.migrate()
    return target


# --- part 1: the store loaded as three daemons' commits ---


def part_selects() -> tuple[str, str, str]:
    """The shipper's SELECTs of spans, scores and resources, reading a part's window instead of a commit range:
    the lake gets every column exactly as a daemon sends it."""
    selects = []
    for statement, part in ((lake_shipper._SPANS, _SPAN_PART), (lake_shipper._SCORES, _SCORE_PART),
                            (lake_shipper._RESOURCES, _SPAN_PART)):
        if _RANGE not in statement:
            raise RuntimeError(f"lake_shipper's SELECT changed; update lake.py: {statement}")
        selects.append(statement.replace(_RANGE, part))
    return selects[0], selects[1], selects[2]


def windows(con: duckdb.DuckDBPyConnection, batch_spans: int, parts: int) -> list[tuple[int, int]]:
    """Time windows [lo, hi) holding about ``batch_spans`` span rows a part each (the generator spaces runs
    evenly in time), covering every span's start and every score's time."""
    spans, lo, hi = con.execute("SELECT count(*), min(start_ns), max(start_ns) FROM span_rows").fetchall()[0]
    score_lo, score_hi = con.execute("SELECT min(time_ns), max(time_ns) FROM scores").fetchall()[0]
    lo, hi = min(lo, score_lo), max(hi, score_hi) + 1
    count = max(1, math.ceil(spans / (batch_spans * parts)))
    edges = [lo + (hi - lo) * i // count for i in range(count)] + [hi]
    return list(zip(edges[:-1], edges[1:], strict=True))


def load_lake(store: Path, target: LakeTarget, batch_spans: int, quiet: bool) -> dict[str, Any]:
    """Commit the store's rows to the lake as ``DAEMONS`` daemons, window by window, each daemon's batch under
    its own name and rising position, as their shippers would."""
    spans_sql, scores_sql, resources_sql = part_selects()
    con = open_read_only(store)
    rows, commits, read_s, commit_s = 0, 0, 0.0, 0.0
    try:
        with LakeClient(target) as client:
            for position, (lo, hi) in enumerate(windows(con, batch_spans, DAEMONS), start=1):
                for part in range(DAEMONS):
                    started = time.perf_counter()
                    params = {"parts": DAEMONS, "part": part, "lo": lo, "hi": hi}
                    tables = {"span_batch": con.execute(spans_sql, params).to_arrow_table(),
                              "score_batch": con.execute(scores_sql, params).to_arrow_table(),
                              "resource_batch": con.execute(resources_sql, params).to_arrow_table()}
                    read_s += time.perf_counter() - started
                    started = time.perf_counter()
                    rows += client.commit(f"daemon-{part}", position - 1, position, tables)
                    commit_s += time.perf_counter() - started
                    commits += 1
                common.say(quiet, f"  lake: {rows:,} span rows in {commits} commits "
                           f"(read {read_s:.0f} s, commit {commit_s:.0f} s)")
    finally:
        con.close()
    return {"span_rows": rows, "commits": commits, "read_s": read_s, "commit_s": commit_s,
            "commit_spans_per_s": rows / commit_s if commit_s else None}


def lake_count(target: LakeTarget, table: str = "spans") -> int:
    """``count(*)`` of a lake table or view, read-only."""
    with LakeClient(target, read_only=True) as client:
        answer, _ = client.query(f"SELECT count(*) AS n FROM {table}")
    return int(answer.column("n")[0].as_py())


def time_shapes(client: Any, ctx: dict[str, Any], repeats: int, quiet: bool, label: str) -> dict[str, Any]:
    """query.py's timings and the span shapes on one client; a failure is kept as its message."""
    out: dict[str, Any] = {}
    for timing in [*query.timings(), *SPAN_SHAPES]:
        try:
            result = query.time_one(timing, client, ctx, repeats)
        except Exception as e:  # deliberate: a shape the lake cannot answer is reported, the rest still run
            out[timing.name] = {"description": timing.description, "error": f"{type(e).__name__}: {e}"[:300]}
            common.say(quiet, f"  {label} {timing.name:<28} failed: {out[timing.name]['error'][:120]}")
            continue
        out[timing.name] = result
        common.say(quiet, f"  {label} {timing.name:<28} {result['median_s']:8.3f} s")
    return out


class PatientLake(LakeStoreClient):
    """``connect(lake=...)``'s client (a read-only ``LakeClient`` behind the SQL guard) with a longer timeout than
    its 30 s: a query the lake answers in 40 s is a figure, not a failure."""

    def __init__(self, target: LakeTarget, timeout_s: float) -> None:
        super().__init__(target.catalog, Path(target.data_path))
        self.timeout_s = timeout_s

    def fetch(self, query: str, params: list[Any] | None = None) -> QueryResult:
        return run_lake_query(self._client, query, params, timeout=self.timeout_s, max_rows=2**62)


def time_lake(target: LakeTarget, ctx: dict[str, Any], args: argparse.Namespace,
              label: str) -> tuple[dict[str, Any], dict[str, float]]:
    """The shapes on the lake, and the machine's cores meanwhile (taken while the lake's process is alive, so its
    CPU counts as this run's)."""
    client = PatientLake(target, args.lake_timeout)
    try:
        busy = Busy()
        return time_shapes(client, ctx, args.repeats, args.json, label), busy.cores()
    finally:
        client.close()


def data_files(target: LakeTarget) -> dict[str, float]:
    """Parquet files in the lake's data directory and their size: what the upkeep merges."""
    files = list(Path(target.data_path).rglob("*.parquet"))
    return {"files": len(files), "mib": sum(f.stat().st_size for f in files) / 2**20}


def query_part(args: argparse.Namespace, server: pg_support.PgServer, root: Path) -> dict[str, Any]:
    """Part 1: the store, the lake loaded from it, both timed, the upkeep, the lake timed again."""
    doc: dict[str, Any] = {"load_start": load(args.json, "part 1 (queries)")}
    path, generated_s = query.ensure_store(args.runs, args.json, args.rebuild)
    query.fold_tail(path)
    store = query.describe_store(path)
    common.say(args.json, f"store {path} ({store['spans']:,} spans, {store['runs']:,} runs)")
    doc.update(store=store, generated_s=generated_s)
    target = fresh_lake(server, "lake_query", root)
    started = time.perf_counter()
    doc["lake_load"] = load_lake(path, target, args.batch_spans, args.json)
    doc["lake_load"]["wall_s"] = time.perf_counter() - started
    doc["lake_spans"] = lake_count(target)
    doc["lake_files_before_upkeep"] = data_files(target)
    ctx = {"run_id": store["sample_run_id"], "session_id": store["sample_session_id"]}
    local, busy = connect(path), Busy()
    try:
        doc["local"] = time_shapes(local, ctx, args.repeats, args.json, "local")
    finally:
        local.close()
    doc["local_busy"] = busy.cores()
    doc["lake"], doc["lake_busy"] = time_lake(target, ctx, args, "lake ")
    doc["load_before_upkeep"] = load(args.json, "upkeep")
    if args.upkeep:
        started = time.perf_counter()
        with LakeClient(target) as client:
            doc["upkeep"] = client.upkeep(0)
        doc["upkeep"]["seconds"] = time.perf_counter() - started
        doc["lake_files_after_upkeep"] = data_files(target)
        common.say(args.json, f"  upkeep {doc['upkeep']}")
        doc["lake_after_upkeep"], doc["lake_after_upkeep_busy"] = time_lake(target, ctx, args, "lake+")
    doc["load_end"] = load(args.json, "part 1 done")
    return doc


# --- part 2: a fleet's daemons committing to one lake ---


def sender_plans(urls: list[str], args: argparse.Namespace, seed: int) -> list[ingest.ClientPlan]:
    """ingest.py's exporters, ``--clients-per-daemon`` to each daemon, as fast as the acks come."""
    seconds = args.warmup + args.window
    return [ingest.ClientPlan(index=i, url=url, seed=seed * 100 + i, spans_per_body=512,
                              prebuilt_bodies=args.prebuilt_bodies, seconds=seconds, max_spans=None,
                              retry_wait_cap_s=1.0, headers={"content-type": "application/x-protobuf"})
            for i, url in enumerate(u for u in urls for _ in range(args.clients_per_daemon))]


def local_committed(daemons: list[DaemonProcess]) -> float:
    """Spans the daemons' loaders committed to their stores so far, together."""
    return sum(ingest.scrape_metrics(d.url).get("lousho_load_spans_sum", 0.0) for d in daemons)


def drive(plans: list[ingest.ClientPlan], daemons: list[DaemonProcess], warmup: float,
          window: float) -> dict[str, Any]:
    """Run the senders; sample the local commits at the window's ends; gather what the senders did."""
    ctx = mp.get_context("spawn")
    ready = [ctx.Event() for _ in plans]
    go, results, start = ctx.Event(), ctx.Queue(), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=ingest._client_main, args=(plan, ready[i], go, start, results), daemon=True)
             for i, plan in enumerate(plans)]
    gathered: list[ingest.ClientResult] = []
    try:
        for proc in procs:
            proc.start()
        for event in ready:
            if not event.wait(300):
                raise RuntimeError("a sender did not build its bodies within 300 s")
        start_at = time.monotonic() + 0.2
        start.value = start_at
        go.set()
        time.sleep(max(0.0, start_at + warmup - time.monotonic()))
        t0_ns, local0, busy = time.time_ns(), local_committed(daemons), Busy()
        time.sleep(max(0.0, start_at + warmup + window - time.monotonic()))
        t1_ns, local1, cores = time.time_ns(), local_committed(daemons), busy.cores()
        while len(gathered) < len(plans):
            gathered.append(results.get(timeout=180))
    finally:
        common.stop_senders(procs, go)
    common.raise_sender_errors(gathered, "sender")
    return {"window_ns": (t0_ns, t1_ns), "local_spans_per_s": (local1 - local0) / window, "local_at_end": local1,
            **cores,
            "acked_spans": sum(c.spans_ok for c in gathered),
            "refused_503": sum(c.refused_503 for c in gathered)}


def lake_rate(target: LakeTarget, t0_ns: int, t1_ns: int) -> tuple[float, int, int]:
    """Span rows/s the lake took in [t0, t1], from its own record of commits: per daemon, the rows of its
    commits after its first one in the window over the time from the first to the last, summed; the commits in
    the window; and the span rows the lake held at t1."""
    with LakeClient(target, read_only=True) as client:
        answer, _ = client.query("SELECT daemon, committed_ns, span_rows FROM lousho_lake_positions "
                                 "WHERE committed_ns BETWEEN ? AND ? ORDER BY daemon, committed_ns", [t0_ns, t1_ns])
        held, _ = client.query("SELECT coalesce(sum(span_rows), 0)::BIGINT AS n FROM lousho_lake_positions "
                               "WHERE committed_ns <= ?", [t1_ns])
    by_daemon: dict[str, list[tuple[int, int]]] = {}
    for row in answer.to_pylist():
        by_daemon.setdefault(row["daemon"], []).append((row["committed_ns"], row["span_rows"]))
    rate = 0.0
    for commits in by_daemon.values():
        if len(commits) >= 2:
            rate += sum(rows for _, rows in commits[1:]) / ((commits[-1][0] - commits[0][0]) / 1e9)
    return rate, sum(len(c) for c in by_daemon.values()), int(held.column("n")[0].as_py())


def store_spans(db: Path) -> int:
    con = open_read_only(db)
    try:
        return int(con.execute("SELECT count(*) FROM spans").fetchall()[0][0])
    finally:
        con.close()


def fleet_round(server: pg_support.PgServer, root: Path, n: int, repeat: int,
                args: argparse.Namespace) -> dict[str, Any]:
    """One round: ``n`` daemons on one fresh lake, fed by senders; committed spans/s, local and to the lake."""
    name = f"fleet_{n}_{repeat}"
    target = fresh_lake(server, name, root)
    workdir = root / name
    daemons: list[DaemonProcess] = []
    load_1m = os.getloadavg()[0]
    try:
        for i in range(n):
            daemons.append(start_daemon(workdir / f"daemon-{i}.duckdb", "--lake", target.catalog, "--lake-data",
                                        target.data_path, "--lake-name", f"daemon-{i}", "--lake-every", "2"))
        driven = drive(sender_plans([d.url for d in daemons], args, seed=args.seed + 10 * n + repeat), daemons,
                       args.warmup, args.window)
        codes = [d.stop(120) for d in daemons]
        daemons = []
    finally:
        for d in daemons:
            d.kill()
    rate, commits, held = lake_rate(target, *driven["window_ns"])
    local = sum(store_spans(workdir / f"daemon-{i}.duckdb") for i in range(n))
    in_lake = lake_count(target)
    return {"daemons": n, "repeat": repeat, "load_1m": load_1m, "lake_spans_per_s": rate,
            "lake_commits_in_window": commits, "local_spans_per_s": driven["local_spans_per_s"],
            # How far the lake was behind the local stores when the window closed, in spans.
            "lake_behind_spans": driven["local_at_end"] - held,
            "acked_spans": driven["acked_spans"], "refused_503": driven["refused_503"],
            "own_cores": driven["own_cores"], "other_cores": driven["other_cores"],
            "steal_cores": driven["steal_cores"],
            "local_spans_at_stop": local, "lake_spans_at_stop": in_lake, "exit_codes": codes}


def fleet_part(args: argparse.Namespace, server: pg_support.PgServer, root: Path) -> dict[str, Any]:
    """Part 2: rounds of 1..3 daemons, interleaved; medians per daemon count."""
    doc: dict[str, Any] = {"load_start": load(args.json, "part 2 (fleet ingest)"), "rounds": []}
    for repeat in range(args.fleet_repeats):
        for n in range(1, DAEMONS + 1):
            result = fleet_round(server, root, n, repeat, args)
            doc["rounds"].append(result)
            common.say(args.json, f"  {n} daemon(s): lake {result['lake_spans_per_s']:,.0f} spans/s, local "
                       f"{result['local_spans_per_s']:,.0f} spans/s (load {result['load_1m']:.2f}); at stop lake "
                       f"{result['lake_spans_at_stop']:,} / local {result['local_spans_at_stop']:,}")
    doc["median"] = {n: {key: common.median([r[key] for r in doc["rounds"] if r["daemons"] == n])
                         for key in ("lake_spans_per_s", "local_spans_per_s")} for n in range(1, DAEMONS + 1)}
    doc["load_end"] = load(args.json, "part 2 done")
    return doc


# --- main ---


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--runs", type=int, default=1_000_000, help="runs in the store (about 10 spans each)")
    p.add_argument("--rebuild", action="store_true", help="regenerate the cached store")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of each query after a warm-up")
    p.add_argument("--batch-spans", type=int, default=250_000, help="span rows per daemon's commit when loading")
    p.add_argument("--lake-timeout", type=float, default=120.0, help="seconds a lake query may take")
    p.add_argument("--no-upkeep", dest="upkeep", action="store_false", help="skip the upkeep and its re-timing")
    p.add_argument("--no-queries", dest="queries", action="store_false", help="skip part 1")
    p.add_argument("--no-fleet", dest="fleet", action="store_false", help="skip part 2")
    p.add_argument("--fleet-repeats", type=int, default=3, help="rounds per daemon count; medians quoted")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of sending before the window")
    p.add_argument("--window", type=float, default=10.0, help="seconds measured")
    p.add_argument("--clients-per-daemon", type=int, default=2, help="sender processes per daemon")
    p.add_argument("--prebuilt-bodies", type=int, default=50, help="per sender; then stamped while sending")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the temp directory (lakes, stores)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = p.parse_args(argv)
    if min(args.runs, args.repeats, args.batch_spans, args.fleet_repeats, args.clients_per_daemon) < 1:
        p.error("--runs, --repeats, --batch-spans, --fleet-repeats and --clients-per-daemon must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    doc: dict[str, Any] = {"benchmark": "lake", "command": common.reproduce_command(), "cpus": os.cpu_count(),
                           "lake_python": lake_python(), "repeats": args.repeats}
    os.environ.setdefault(PYTHON_ENV, doc["lake_python"])
    root = Path(tempfile.mkdtemp(prefix="lousho-lake-bench-"))
    try:
        with postgres() as server:
            if args.queries:
                doc["queries"] = query_part(args, server, root)
            if args.fleet:
                doc["fleet"] = fleet_part(args, server, root)
    finally:
        if args.keep:
            common.say(args.json, f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    doc["total_s"] = time.perf_counter() - started
    if args.json:
        common.emit_json(doc)
    else:
        print_report(doc)
    return 0


def print_report(doc: dict[str, Any]) -> None:
    if "queries" in doc:
        print_queries(doc["queries"], doc["repeats"])
    if "fleet" in doc:
        print_fleet(doc["fleet"])
    print(f"total {doc['total_s']:.0f} s")
    print(f"reproduce: {doc['command']}")


def _seconds(result: dict[str, Any] | None) -> str:
    if result is None:
        return "-"
    return "failed" if "error" in result else f"{result['median_s']:.3f}"


def print_queries(q: dict[str, Any], repeats: int) -> None:
    s, ll = q["store"], q["lake_load"]
    print(f"\nqueries over {s['spans']:,} spans / {s['runs']:,} runs; the lake loaded as {DAEMONS} daemons' "
          f"{ll['commits']} commits ({ll['span_rows']:,} span rows; commits {ll['commit_s']:.0f} s, "
          f"{ll['commit_spans_per_s'] or 0:,.0f} span rows/s); median of {repeats} after a warm-up; load "
          f"{q['load_start']:.2f} -> {q['load_end']:.2f}")
    after = q.get("lake_after_upkeep", {})
    print("| query | local s | lake s | ratio | lake s after upkeep | ratio |")
    print("|---|---|---|---|---|---|")
    for name, local in q["local"].items():
        lake, upkept = q["lake"].get(name), after.get(name)
        cells = [_seconds(local), _seconds(lake), _ratio(local, lake), _seconds(upkept), _ratio(local, upkept)]
        print(f"| {local['description']} | " + " | ".join(cells) + " |")
    for table in (q["lake"], after):
        for name, result in table.items():
            if "error" in result:
                print(f"  {name} failed on the lake: {result['error']}")
    for key in ("local_busy", "lake_busy", "lake_after_upkeep_busy"):
        if key in q:
            b = q[key]
            print(f"  while timing {key.removesuffix('_busy').replace('_', ' ')}: this run {b['own_cores']:.2f} cores, "
                  f"the rest of the machine {b['other_cores']:.2f} cores busy, {b['steal_cores']:.2f} stolen")
    if "upkeep" in q:
        print(f"upkeep: {q['upkeep']['seconds']:.1f} s ({q['upkeep']}); data files {q['lake_files_before_upkeep']} "
              f"-> {q['lake_files_after_upkeep']}")


def _ratio(local: dict[str, Any], lake: dict[str, Any] | None) -> str:
    if lake is None or "error" in lake or "error" in local:
        return "-"
    return f"{lake['median_s'] / local['median_s']:.1f}x"


def print_fleet(f: dict[str, Any]) -> None:
    print(f"\nfleet ingest: load {f['load_start']:.2f} -> {f['load_end']:.2f}")
    print("| daemons | committed to the lake, spans/s | committed locally, spans/s | lake / local |")
    print("|---|---|---|---|")
    for n, med in f["median"].items():
        print(f"| {n} | {med['lake_spans_per_s']:,.0f} | {med['local_spans_per_s']:,.0f} | "
              f"{med['lake_spans_per_s'] / med['local_spans_per_s']:.2f} |")
    for r in f["rounds"]:
        print(f"  round {r['repeat']} x{r['daemons']}: lake {r['lake_spans_per_s']:,.0f}/s "
              f"({r['lake_commits_in_window']} commits, {r['lake_behind_spans']:,.0f} spans behind at the end), "
              f"local {r['local_spans_per_s']:,.0f}/s, load "
              f"{r['load_1m']:.2f}, the rest of the machine {r['other_cores']:.2f} cores busy (this run "
              f"{r['own_cores']:.2f}), 503s {r['refused_503']}; at stop lake {r['lake_spans_at_stop']:,} / local "
              f"{r['local_spans_at_stop']:,}, exit codes {r['exit_codes']}")


if __name__ == "__main__":
    sys.exit(main())
