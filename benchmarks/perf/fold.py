"""What a fold of the kept runs costs (runs_table.fold), per span folded, at a few tail sizes.

On a copy of the query benchmark's store (``query.py``: 1M runs, folded), each round commits a tail
of new runs (about 10 spans each) plus a second score for a tenth as many runs already kept (so the
fold merges into kept parts too, as a resumed or late-scored run makes it), then times one fold of it
on its own connection, as the daemon's fold thread runs it. The copy is deleted afterwards.

    .venv/bin/python benchmarks/perf/fold.py [--runs 1000000] [--tails 1000,5000,20000,50000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import _common as common
import duckdb
import query

from lousho.observe.runs import runs_table


def add_round(con: duckdb.DuckDBPyConnection, first_run: int, spans: int, seq: int) -> int:
    """Commit about ``spans`` spans of new runs from ``first_run`` and late scores for kept runs; returns
    the runs added."""
    runs = max(1, spans // 10)
    con.execute("BEGIN")
    con.execute(query._INSERT_SPANS, [first_run, first_run + runs, seq])
    con.execute(query._INSERT_SCORES, [first_run, first_run + runs, seq])
    con.execute("INSERT INTO scores SELECT span_key, seq + ?, trace_id, span_id, run_id, name, score_value, "
                "score_label, explanation, failed_check, passed, error_type, time_ns, attributes, ? FROM scores "
                f"WHERE seq = 0 AND commit_seq = 0 USING SAMPLE {max(1, runs // 10)} ROWS", [seq, seq])
    con.execute("COMMIT")
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1_000_000, help="runs in the query benchmark's store")
    p.add_argument("--tails", default="1000,5000,20000,50000", help="spans per fold, comma-separated")
    args = p.parse_args(argv)
    source, _ = query.ensure_store(args.runs, False)
    query.fold_tail(source)
    copy = source.with_name(f"fold-{os.getpid()}.duckdb")
    shutil.copyfile(source, copy)
    print(f"store {source} ({args.runs:,} runs), copied to {copy}; load {os.getloadavg()[0]:.1f}")
    try:
        con = duckdb.connect(str(copy))
        next_run = args.runs
        for seq, spans in enumerate((int(t) for t in args.tails.split(",")), start=1):
            next_run += add_round(con, next_run, spans, seq)
            started = time.perf_counter()
            folded = runs_table.fold(con.cursor())
            seconds = time.perf_counter() - started
            print(f"  tail {folded:>7,} spans: fold {seconds:6.3f} s, {seconds / folded * 1e6:6.1f} µs/span "
                  f"(load {os.getloadavg()[0]:.1f})")
        con.close()
    finally:
        copy.unlink(missing_ok=True)
        copy.with_name(copy.name + ".wal").unlink(missing_ok=True)
    print(f"reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
