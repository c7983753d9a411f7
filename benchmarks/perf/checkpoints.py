"""Checkpoint store timing: durable writes per second, and what checkpointing costs a realistic run.

Measures, for SQLite with synchronous NORMAL (the store's default) and with synchronous FULL:

1. durable checkpoint writes per second: ``save_step`` calls, each its own committed transaction, on one run,
   in one process, and in two processes writing two runs into the same file at once (median of --repeats);
2. the overhead of checkpointing a 20-step run whose every step is an HTTP call to a local server that takes
   --work-ms to answer (a stand-in for a tool or model call): the run through ``durable.start``/``step``/
   ``finish`` against the same 20 calls made directly, without a store (each durable run timed right after
   its plain twin; the median of the --runs paired ratios; the median of --repeats such medians).

Goals (printed as ratios): at least 1,000 durable writes/s, and less than 10% overhead on the 20-step run.
Files go under .lousho/bench in the repository by default, not /tmp: /tmp is often tmpfs, where fsync is
free and FULL would look as cheap as NORMAL.

    .venv/bin/python benchmarks/perf/checkpoints.py [--json]

--json prints one object: ``overhead_1ms_steps`` and ``durable_writes_per_s`` (NORMAL), the same with ``_full``,
the load average before and after, and every figure of each setting under ``results``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lousho.recover import durable
from lousho.recover.store import open as open_store

REPO = Path(__file__).resolve().parents[2]
WRITES_GOAL = 1_000.0  # durable checkpoint writes per second
OVERHEAD_GOAL = 0.10  # of a 20-step run's wall time


def say(quiet: bool, *parts: Any) -> None:
    """Progress for a person; on stderr under --json so stdout stays one JSON document."""
    print(*parts, file=sys.stderr if quiet else sys.stdout, flush=True)


# --- writes per second ---


def _write_burst(url: str, history: int, run_id: str, writes: int) -> tuple[float, float]:
    """Record ``writes`` steps on a new run; (start, end) wall-clock seconds, comparable across processes."""
    store = open_store(url, history_limit=history)
    try:
        store.create_run(run_id, agent="bench", kind="send", input={"bench": True})
        output = {"tool": "search", "result": "x" * 200}  # a small tool result
        start = time.time()
        for step in range(writes):
            store.save_step(run_id, step, "tool", output, epoch=0)
        return start, time.time()
    finally:
        store.close()


def _worker(url: str, history: int, run_id: str, writes: int, go: Any, results: Any) -> None:
    go.wait()
    results.put(_write_burst(url, history, run_id, writes))


def writes_per_second(url: str, history: int, writes: int, repeats: int, processes: int) -> list[float]:
    """Aggregate writes/s of ``processes`` writers on one file, once per repeat."""
    rates = []
    open_store(url, history_limit=history).close()  # the file made and migrated before the writers race to open it
    ctx = mp.get_context("spawn")  # a fresh interpreter per writer, as separate agent processes would be
    for r in range(repeats):
        if processes == 1:
            start, end = _write_burst(url, history, f"single-{r}", writes)
            rates.append(writes / (end - start))
            continue
        go, results = ctx.Event(), ctx.Queue()
        workers = [ctx.Process(target=_worker, args=(url, history, f"multi-{r}-{p}", writes, go, results))
                   for p in range(processes)]
        for w in workers:
            w.start()
        time.sleep(1.0)  # let each interpreter import lousho and open the store before the start signal
        go.set()
        spans = [results.get(timeout=300) for _ in workers]
        for w in workers:
            w.join()
            if w.exitcode != 0:
                raise RuntimeError(f"writer exited with {w.exitcode}")
        rates.append(processes * writes / (max(e for _, e in spans) - min(s for s, _ in spans)))
    return rates


# --- overhead on a realistic run ---


class _ToolHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as model and tool clients use
    # Headers and body go out in two writes; with Nagle on, the body waits for the client's delayed ACK
    # (~40 ms on Linux) and every step would measure TCP, not the tool.
    disable_nagle_algorithm = True
    work_s = 0.001

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        time.sleep(self.work_s)
        body = json.dumps({"ok": True, "path": self.path, "items": list(range(8))}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


def _serve_tools(work_ms: float, ports: Any, stop: Any) -> None:
    handler = type("Handler", (_ToolHandler,), {"work_s": work_ms / 1000})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    ports.put(server.server_address[1])
    stop.wait()
    server.shutdown()
    server.server_close()


@contextmanager
def tool_server(work_ms: float) -> Iterator[int]:
    """A tool server in its own process, as a real tool or model is: in-process, its thread would contend for
    the GIL with the run's SQLite calls and charge the store for the server's Python time."""
    ctx = mp.get_context("spawn")
    ports, stop = ctx.Queue(), ctx.Event()
    process = ctx.Process(target=_serve_tools, args=(work_ms, ports, stop), daemon=True)
    process.start()
    try:
        yield ports.get(timeout=60)
    finally:
        stop.set()
        process.join(30)
        if process.is_alive():
            process.kill()
            process.join()


def _tool_call(conn: http.client.HTTPConnection, step: int) -> Callable[[], Any]:
    def call() -> Any:
        conn.request("GET", f"/tool/{step}")
        return json.loads(conn.getresponse().read())

    return call


def run_overhead(url: str, history: int, port: int, steps: int, runs: int, tag: str = "") -> dict[str, float]:
    store = open_store(url, history_limit=history)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    plain, checkpointed = [], []
    try:
        for r in range(runs + 2):  # the first two of each are warm-up
            t = time.perf_counter()
            outputs = [_tool_call(conn, i)() for i in range(steps)]
            plain.append(time.perf_counter() - t)

            t = time.perf_counter()
            run = durable.start(store, f"overhead-{tag}{r}", "bench", "send", {"task": r})
            outputs = [run.step(f"tool-{i}", _tool_call(conn, i)) for i in range(steps)]
            run.finish(outputs)
            checkpointed.append(time.perf_counter() - t)
    finally:
        conn.close()
        store.close()
    plain, checkpointed = plain[2:], checkpointed[2:]
    # Each durable run is timed right after its plain twin, so the pair shares the machine's load at that moment;
    # the median of the paired ratios is steadier than a ratio of medians on a busy machine.
    overhead = statistics.median(d / p for p, d in zip(plain, checkpointed, strict=True)) - 1
    plain_s = statistics.median(plain)
    per_step_s = overhead * plain_s / steps
    return {"plain_run_ms": plain_s * 1000, "durable_run_ms": statistics.median(checkpointed) * 1000,
            "overhead": overhead, "per_step_overhead_ms": per_step_s * 1000,
            # the step length from which the overhead goal holds, for this per-step cost
            "goal_holds_from_step_ms": per_step_s / OVERHEAD_GOAL * 1000, "plain_step_ms": plain_s / steps * 1000}


# --- report ---


def measure(args: argparse.Namespace, directory: Path, synchronous: str, history: int) -> dict[str, Any]:
    def url(name: str) -> str:
        return f"sqlite:///{directory / f'{name}-{synchronous}-{history}.db'}?synchronous={synchronous}"

    single = writes_per_second(url("single"), history, args.writes, args.repeats, 1)
    double = writes_per_second(url("double"), history, args.writes, args.repeats, 2)
    with tool_server(args.work_ms) as port:
        # --repeats times --runs pairs; the repeat whose overhead is the median stands for all (its other figures
        # go with it), and every repeat's overhead is kept.
        samples = [run_overhead(url("overhead"), history, port, args.steps, args.runs, tag=f"{k}-")
                   for k in range(args.repeats)]
    overhead = sorted(samples, key=lambda o: o["overhead"])[len(samples) // 2]
    return {
        "synchronous": synchronous,
        "history_limit": history,
        "writes_per_s_1_process": statistics.median(single),
        "writes_per_s_2_processes": statistics.median(double),
        "writes_per_s_samples": {"1": single, "2": double},
        **overhead,
        "overhead_samples": [o["overhead"] for o in samples],
    }


# (synchronous, history_limit): the default and FULL. The history is a view of the checkpoints (schema 3), so its
# limit no longer changes what a step writes.
CONFIGS = {"normal": [("normal", 50)], "full": [("full", 50)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=2000, help="checkpoint writes per writer per repeat")
    parser.add_argument("--repeats", type=int, default=5,
                        help="repeats of each writes/s and overhead measurement (median)")
    parser.add_argument("--steps", type=int, default=20, help="steps of the overhead run")
    parser.add_argument("--runs", type=int, default=40, help="runs of each kind for the overhead (median)")
    parser.add_argument("--work-ms", type=float, default=1.0, help="how long the local tool server takes")
    parser.add_argument("--synchronous", choices=["normal", "full", "both"], default="both")
    parser.add_argument("--dir", type=Path, default=REPO / ".lousho" / "bench",
                        help="where the store files go (a real disk, not tmpfs)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    quiet = args.json
    command = shlex.join([os.path.relpath(sys.executable, REPO), os.path.relpath(__file__, REPO), *sys.argv[1:]])
    args.dir.mkdir(parents=True, exist_ok=True)
    configs = [c for mode in (["normal", "full"] if args.synchronous == "both" else [args.synchronous])
               for c in CONFIGS[mode]]
    results = []
    load_before = os.getloadavg()
    say(quiet, f"load average (1, 5, 15 min) on {os.cpu_count()} CPUs: {load_before}")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="checkpoints-") as tmp:
        for mode, history in configs:
            say(quiet, f"measuring synchronous={mode} history_limit={history} ...")
            results.append(measure(args, Path(tmp), mode, history))
    by_mode = {r["synchronous"]: r for r in results}
    headline = {}
    for mode, suffix in (("normal", ""), ("full", "_full")):
        if mode in by_mode:
            # The headline figures: the overhead on 1 ms steps (None when --work-ms asks for other steps) and durable
            # writes per second of one process.
            headline[f"overhead_1ms_steps{suffix}"] = by_mode[mode]["overhead"] if args.work_ms == 1.0 else None
            headline[f"durable_writes_per_s{suffix}"] = by_mode[mode]["writes_per_s_1_process"]
    doc = {"command": command, "goals": {"writes_per_s": WRITES_GOAL, "overhead": OVERHEAD_GOAL},
           "work_ms": args.work_ms, "steps": args.steps, "cpus": os.cpu_count(),
           "load_average": {"before": list(load_before), "after": list(os.getloadavg())}, **headline,
           "results": results}
    if args.json:
        print(json.dumps(doc, sort_keys=True, indent=2))
        return
    print(f"\ncommand: {command}")
    print(f"load average before {load_before}, after {tuple(doc['load_average']['after'])}, on {os.cpu_count()} CPUs")
    print(f"step = one HTTP GET to a local server answering in {args.work_ms:g} ms; run = {args.steps} steps\n")
    for r in results:
        print(f"synchronous={r['synchronous'].upper()}, history_limit={r['history_limit']}")
        for label, key in (("1 process", "writes_per_s_1_process"), ("2 processes", "writes_per_s_2_processes")):
            print(f"  durable writes/s, {label:<11}: {r[key]:>9,.0f}   {r[key] / WRITES_GOAL:5.1f}x the goal "
                  f"of {WRITES_GOAL:,.0f}/s")
        print(f"  20-step run: {r['plain_run_ms']:.1f} ms without a store, {r['durable_run_ms']:.1f} ms durable: "
              f"overhead {r['overhead']:.1%} ({r['per_step_overhead_ms']:.3f} ms/step; median of "
              f"{', '.join(f'{o:.1%}' for o in r['overhead_samples'])}), "
              f"{'within' if r['overhead'] < OVERHEAD_GOAL else 'OVER'} the {OVERHEAD_GOAL:.0%} goal")
        print(f"  (a step here takes {r['plain_step_ms']:.2f} ms; the {OVERHEAD_GOAL:.0%} goal holds for steps of "
              f"{r['goal_holds_from_step_ms']:.2f} ms or longer)")


if __name__ == "__main__":
    main()
