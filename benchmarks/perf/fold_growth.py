"""What a fold costs as the store grows: µs per span of each fold, and of its step that makes the sessions again.

In this process, into a fresh store: ``--commits`` commits of ``--size`` spans of the ingest benchmark's bodies
(``--roots-only``: a run and a score on every span), each folded at once, as the daemon's fold thread does under
load. The benchmark's bodies carry the same 171 conversation ids, so every fold touches every session, and the
fold makes each session's row again from all its kept runs (runs_table.py, ``_WRITE_FOLD``): that step grows with
the store, where the others stay near what one tail costs.

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
from append import _fold_timed

from lousho.observe.decode import otlp_native
from lousho.observe.store import span_store


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commits", type=int, default=16, help="commits, each folded at once (at least 3)")
    p.add_argument("--size", type=int, default=65_536, help="spans per commit")
    p.add_argument("--roots-only", action="store_true", help="a run and a score on every span, as ingest.py's")
    args = p.parse_args(argv)
    template = common.templates(1, 21, 512, args.roots_only)[0]
    decode = otlp_native.protobuf_decoder()
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="lousho-fold-growth-") as tmp:
        store = span_store.SpanStore(Path(tmp) / "growth.duckdb", fold_thread=False)
        try:
            for number in range(1, args.commits + 1):
                store.append([span_store.arrow_batch(decode(template.stamp())) for _ in range(args.size // 512)])
                steps: collections.Counter = collections.Counter()
                started = time.perf_counter()
                _fold_timed(store, steps)
                took = time.perf_counter() - started
                sessions = sum(seconds for statement, seconds in steps.items() if "kept_sessions" in statement)
                spans = number * (args.size // 512) * 512
                rows.append((spans, took, sessions, steps))
                print(f"  {spans:>10,} spans stored: fold {took / args.size * 1e6:6.2f} µs/span, "
                      f"the sessions' step {sessions / args.size * 1e6:5.2f}", flush=True)
        finally:
            store.close()
    first, last = rows[1], rows[-1]  # the first fold builds the kept tables whole: other statements
    print(f"the steps that grew most, µs/span at {first[0]:,} and at {last[0]:,} spans:")
    grown = sorted(last[3], key=lambda statement: first[3][statement] - last[3][statement])[:6]
    for statement in grown:
        before, after = (row[3][statement] / args.size * 1e6 for row in (first, last))
        print(f"  {before:6.2f} {after:6.2f}  {statement}")
    print(f"the fold grew {last[1] / first[1]:.1f}x and its sessions' step {last[2] / first[2]:.1f}x from "
          f"{first[0]:,} to {last[0]:,} spans; load {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
