"""The protobuf decoder alone, in-process: spans/s decoded for the store (decode + Arrow tables), one thread,
and the memory one large request takes while decoded.

Speed: the ingest benchmark's 512-span bodies (``--bodies`` of them, fresh ids each) through
``store.decode_for_store`` with the decoder the daemon runs, ``--repeats`` passes, best and median; the decode
alone beside it. Memory: one request of ``--spans`` spans decoded for the store in a fresh process; the growth
of the peak resident set (VmHWM, reset just before) and of the resident set while the tables are held, per
byte of body.

``--check`` adds the check the request path runs before its ack (``otlp_native.protobuf_checker``: the same
walk and counts, no rows) beside the decode, in speed and memory, on those bodies and on the red-team body of
issue 28 (``--tiny`` spans of 51 bytes in one request: 200,000 make 9.7 MiB).

Not a timed test: run by hand.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import _common as common
from hostile_bodies import tiny_spans_body

from lousho.observe.decode import otlp_native
from lousho.observe.store.span_store import decode_for_store


def _status(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def _runs(check: bool) -> dict[str, Callable[[bytes], object]]:
    decode = otlp_native.protobuf_decoder()
    runs = {"decode": decode, "decode + Arrow tables": lambda body: decode_for_store(decode, body)}
    if check:
        runs = {"check": otlp_native.protobuf_checker(), **runs}
    return runs


def speed(sample: list[bytes], spans: int, repeats: int, check: bool) -> None:
    for label, run in _runs(check).items():
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            for body in sample:
                run(body)
            rates.append(spans / (time.perf_counter() - start))
        print(f"    {label:22} best {max(rates):>9,.0f} spans/s, median {statistics.median(rates):>9,.0f}")


def _bench_bodies(count: int) -> tuple[list[bytes], int]:
    templates = common.templates(4, 3, 512)
    return [templates[i % 4].stamp() for i in range(count)], sum(templates[i % 4].span_count for i in range(count))


def memory(spans: int, tiny: bool, label: str) -> None:
    """Run in a process of its own (``--memory-child``): the peak must not include another figure's."""
    run = _runs(True)[label]
    if tiny:
        warm, body = tiny_spans_body(512), tiny_spans_body(spans)
    else:
        templates = common.templates(4, 3, 512)
        warm = templates[0].stamp()
        body = b"".join(templates[i % 4].stamp() for i in range(spans // 512))
        del templates
    run(warm)  # the first call's allocations are not the request's
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM restarts from the current resident set
    before = _status("VmRSS")
    result = run(body)
    peak, held = _status("VmHWM") - before, _status("VmRSS") - before
    size = len(body) / 2**20
    tables = ""
    if isinstance(result, tuple):
        batch = result[1]
        tables = f"tables {batch.spans.nbytes / 2**20:.1f} + {batch.scores.nbytes / 2**20:.1f} MiB; "
    print(f"    {label:22} {tables}peak +{peak:.1f} MiB ({peak / size:.2f}x the body), held +{held:.1f} MiB "
          f"({held / size:.2f}x)")


def memory_figures(spans: int, tiny: bool, check: bool) -> None:
    for label in _runs(check) if check else ["decode + Arrow tables"]:
        subprocess.run([sys.executable, __file__, "--memory-child", label, "--spans", str(spans)]
                       + (["--tiny-child"] if tiny else []), check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bodies", type=int, default=64, help="512-span bodies per timed pass")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--spans", type=int, default=51_200, help="spans in the request whose memory is measured")
    p.add_argument("--check", action="store_true", help="the check beside the decode, and the red-team body")
    p.add_argument("--tiny", type=int, default=200_000, help="spans of the red-team body (with --check)")
    p.add_argument("--memory-child", help=argparse.SUPPRESS)
    p.add_argument("--tiny-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_child:
        memory(args.spans, args.tiny_child, args.memory_child)
        return 0
    print(f"{otlp_native.NAME} decoder, load {os.getloadavg()[0]:.2f}")
    sample, spans = _bench_bodies(args.bodies)
    print(f"  {args.bodies} bodies of 512 spans, {sum(map(len, sample)) / len(sample) / 1024:.0f} KiB each:")
    speed(sample, spans, args.repeats, args.check)
    del sample
    print(f"  one request of {args.spans:,} such spans, in a fresh process each:")
    memory_figures(args.spans, False, args.check)
    if args.check:
        tiny = tiny_spans_body(args.tiny)
        print(f"  the red-team body, {args.tiny:,} tiny spans in {len(tiny) / 2**20:.1f} MiB:")
        speed([tiny], args.tiny, max(3, args.repeats // 3), True)
        del tiny
        memory_figures(args.tiny, True, True)
    print(f"load after {os.getloadavg()[0]:.2f}; reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
