"""The runs' partial aggregates of one large load, alone and beside a busy Python thread.

The fold runs on a thread of its own while the request path, Python, is busy. Work made of many short numpy or
Arrow calls lets go of the interpreter's lock at each call and waits to take it back behind that thread; one
DuckDB statement holds it only at its start and end. This times the parts of ``--spans`` spans of the ingest
benchmark's bodies (``--roots-only``: a run on every span) both ways: DuckDB's SQL (``runs_parts.trace_batch`` and
``attempt_batch``) over the rows as Arrow, and, on a tree that has it (commit 76a0f68, item 4 of issue 28's first
form: run this script with ``PYTHONPATH`` set to a checkout of it), ``runs.batch_parts`` made by numpy and Arrow.
Medians of ``--repeats``; milliseconds.

Not a timed test: run by hand.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable

import _common as common
import duckdb
import pyarrow as pa

from lousho.observe.decode import otlp_native
from lousho.observe.runs import runs_parts
from lousho.observe.store import span_store


def _rows(spans: int, roots_only: bool) -> tuple[pa.Table, pa.Table]:
    template = common.templates(1, 21, 512, roots_only)[0]
    decode = otlp_native.protobuf_decoder()
    batches = [span_store.arrow_batch(decode(template.stamp())) for _ in range(max(1, spans // 512))]
    return pa.concat_tables([b.spans for b in batches]), pa.concat_tables([b.scores for b in batches])


def _sql(spans: pa.Table, scores: pa.Table) -> Callable[[], object]:
    con = duckdb.connect()
    con.register("span_rows", spans.select(runs_parts.SPAN_INPUTS))
    con.register("score_rows", scores)

    def run() -> object:
        con.sql(runs_parts.trace_batch("span_rows", "score_rows")).to_arrow_table()
        return con.sql(runs_parts.attempt_batch("span_rows")).to_arrow_table()

    return run


def _timed(work: Callable[[], object], busy: bool) -> float:
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=spin) if busy else None
    if thread is not None:
        thread.start()
    try:
        started = time.perf_counter()
        work()
        return time.perf_counter() - started
    finally:
        stop.set()
        if thread is not None:
            thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=131_072)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--roots-only", action="store_true", help="a run and a score on every span")
    args = parser.parse_args(argv)
    spans, scores = _rows(args.spans, args.roots_only)
    ways: dict[str, Callable[[], object]] = {"DuckDB SQL over the rows as Arrow": _sql(spans, scores)}
    try:
        from lousho.observe.runs import batch_parts  # only on the tree of item 4's first form
    except ImportError:
        print("(runs.batch_parts is not in this tree: SQL only)", file=sys.stderr)
    else:
        ways["numpy and Arrow calls (runs.batch_parts)"] = lambda: batch_parts.batch_parts(spans, scores)
    print(f"the parts of {spans.num_rows:,} spans ({'a run on every span' if args.roots_only else 'the workload'})"
          f", median of {args.repeats}; load {os.getloadavg()[0]:.2f}")
    for name, work in ways.items():
        work()  # warm up
        alone = common.median([_timed(work, busy=False) for _ in range(args.repeats)])
        busy = common.median([_timed(work, busy=True) for _ in range(args.repeats)])
        print(f"  {name:45} alone {alone * 1e3:8.0f} ms   beside a busy Python thread {busy * 1e3:8.0f} ms "
              f"({busy / alone:.1f}x)")
    roots = " --roots-only" if args.roots_only else ""
    print(f"reproduce: .venv/bin/python benchmarks/perf/parts_lock.py --spans {args.spans} --repeats {args.repeats}"
          f"{roots}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
