"""The writer's commit alone: ``SpanStore.append`` of one group of spans, in µs per span, by group size.

In this process, on one thread, into a fresh store: ``--commits`` groups of each size (512, 1,024 and 8,192 spans
of the ingest benchmark's bodies, fresh ids each, in bodies of 512 as the loader takes them), the first few as
warm-up; each body already decoded and converted to Arrow as the daemon's decoding threads hand it over (what a
code tree without that step takes, a Decoded, is passed instead). Reports the median µs/span and ms per commit.
Every commit is durable (DuckDB's COMMIT: WAL write and fdatasync). The median hides the checkpoints a WAL past
DuckDB's threshold forces into a commit; the mean over the measured commits includes them. CPU is the process's
over each commit, all threads (DuckDB's workers; without ``--fold-each``, the fold thread's too), per span: on a
busy machine it is what limits the loader. The store's fold runs on its own thread meanwhile, as in the daemon;
with ``--fold-each`` it runs after each commit instead, timed apart (what a fold costs by the size of its tail),
and ``--fold-steps`` splits that time by the fold's SQL statements (which of them read the tail's spans, and which
only its traces and runs).

Not a timed test: run by hand; it writes only under a temporary directory.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

import _common as common

from lousho.observe.decode import otlp_native
from lousho.observe.runs import runs_table
from lousho.observe.store import span_store


class _TimedConnection:
    """The fold's connection, timing each statement it runs (by its first words: the step's table)."""

    def __init__(self, con, seconds: collections.Counter) -> None:
        self._con = con
        self._seconds = seconds

    def execute(self, sql: str, *args):
        started = time.perf_counter()
        try:
            return self._con.execute(sql, *args)
        finally:
            self._seconds[" ".join(" ".join(sql.split()).split(" ", 5)[:5])] += time.perf_counter() - started


def _fold_timed(store: span_store.SpanStore, seconds: collections.Counter) -> None:
    # The store's fold, on its own connection and under its lock, with each statement timed.
    fold = store._fold  # noqa: SLF001 - a benchmark looking inside on purpose
    with fold.lock:
        runs_table.fold(_TimedConnection(fold._con, seconds))  # noqa: SLF001


def _converter():
    convert = getattr(span_store, "arrow_batch", None)  # absent before the Arrow hand-over
    return convert if convert is not None else (lambda decoded: decoded)


def measure(size: int, commits: int, workdir: Path, roots_only: bool = False,
            fold_each: bool = False, fold_steps: bool = False) -> dict:
    # One load of the daemon's is a list of its requests' batches: 512 spans each (or the size, if smaller).
    per_body = min(size, 512)
    template = common.templates(1, 21, per_body, roots_only)[0]
    decode = otlp_native.protobuf_decoder()
    convert = _converter()
    groups = [[convert(decode(template.stamp())) for _ in range(size // per_body)] for _ in range(commits)]
    store = span_store.SpanStore(workdir / f"append-{size}.duckdb", fold_thread=not fold_each)
    try:
        times, cpu, folds = [], [], []
        steps: collections.Counter = collections.Counter()
        for group in groups:
            started, cpu_started = time.perf_counter(), time.process_time()
            result = store.append(group)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
            assert result.inserted == size // per_body * per_body, result
            if fold_each:
                started = time.perf_counter()
                if fold_steps:
                    timed: collections.Counter = collections.Counter()
                    _fold_timed(store, timed)
                    if len(folds) >= min(3, commits - 1):  # past the warm-up, as the mean below
                        steps.update(timed)
                else:
                    store.fold()
                folds.append(time.perf_counter() - started)
        warm = min(3, len(times) - 1)
        measured = times[warm:]
        row = {"size": size, "us_per_span": common.median(measured) / size * 1e6,
               "ms_per_commit": common.median(measured) * 1e3,
               "mean_us_per_span": sum(measured) / (len(measured) * size) * 1e6,
               "cpu_us_per_span": common.median(cpu[warm:]) / size * 1e6}
        if folds:
            row["fold_mean_us_per_span"] = sum(folds[warm:]) / (len(folds[warm:]) * size) * 1e6
        if steps:
            row["fold_steps"] = {k: v / (len(folds[warm:]) * size) * 1e6 for k, v in steps.items()}
        return row
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commits", type=int, default=30, help="commits of each size (the first 3 warm up)")
    p.add_argument("--sizes", default="512,1024,8192", help="spans per commit, comma-separated")
    p.add_argument("--roots-only", action="store_true", help="a run and a score on every span, as ingest.py's")
    p.add_argument("--fold-each", action="store_true",
                   help="no fold thread: fold after each commit and time it (the fold's cost by the size of its tail)")
    p.add_argument("--fold-steps", action="store_true", help="with --fold-each: the fold's time by SQL statement")
    args = p.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lousho-append-") as tmp:
        rows = [measure(int(size), args.commits, Path(tmp), args.roots_only, args.fold_each, args.fold_steps)
                for size in args.sizes.split(",")]
    print(f"SpanStore.append, one thread, {otlp_native.NAME} decoder; load {load_before[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after")
    for row in rows:
        fold = f"   fold {row['fold_mean_us_per_span']:6.2f} µs/span (mean)" if "fold_mean_us_per_span" in row else ""
        print(f"  {row['size']:6,} spans per commit: {row['us_per_span']:6.2f} µs/span   "
              f"{row['ms_per_commit']:7.2f} ms per commit (median)   "
              f"{row['mean_us_per_span']:6.2f} µs/span (mean)   CPU {row['cpu_us_per_span']:6.2f} µs/span{fold}")
        if "fold_steps" in row:
            for statement, us in sorted(row["fold_steps"].items(), key=lambda kv: -kv[1])[:12]:
                print(f"      {us:6.2f} µs/span  {statement}")
    print(f"reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
