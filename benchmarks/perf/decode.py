"""The protobuf decoder alone, in-process: spans/s decoded for the store (decode + Arrow tables), one thread,
and the memory one large request takes while decoded.

Speed: the ingest benchmark's 512-span bodies (``--bodies`` of them, fresh ids each) through
``store.decode_for_store`` with the decoder the daemon runs, ``--repeats`` passes, best and median; the decode
alone beside it. Memory: one request of ``--spans`` spans decoded for the store in a fresh process; the growth
of the peak resident set (VmHWM, reset just before) and of the resident set while the tables are held, per
byte of body.

Not a timed test: run by hand.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common as common

from lousho.observe.decode import otlp_native
from lousho.observe.store.span_store import decode_for_store


def _status(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def speed(bodies: int, repeats: int) -> None:
    templates = common.templates(4, 3, 512)
    sample = [templates[i % 4].stamp() for i in range(bodies)]
    spans = sum(templates[i % 4].span_count for i in range(bodies))
    decode = otlp_native.protobuf_decoder()
    for label, run in (("decode", decode), ("decode + Arrow tables", lambda body: decode_for_store(decode, body))):
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            for body in sample:
                run(body)
            rates.append(spans / (time.perf_counter() - start))
        print(f"  {label:22} best {max(rates):>9,.0f} spans/s, median {statistics.median(rates):>9,.0f}")


def memory(spans: int) -> None:
    """Run in a process of its own (``--memory-child``): the peak must not include another figure's."""
    templates = common.templates(4, 3, 512)
    decode = otlp_native.protobuf_decoder()
    decode_for_store(decode, templates[0].stamp())  # the first call's allocations are not the request's
    body = b"".join(templates[i % 4].stamp() for i in range(spans // 512))
    del templates
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM restarts from the current resident set
    before = _status("VmRSS")
    decoded, batch = decode_for_store(decode, body)
    peak, held = _status("VmHWM") - before, _status("VmRSS") - before
    size = len(body) / 2**20
    print(f"  one request of {spans:,} spans, {size:.1f} MiB: tables {batch.spans.nbytes / 2**20:.1f} + "
          f"{batch.scores.nbytes / 2**20:.1f} MiB; peak +{peak:.0f} MiB ({peak / size:.1f}x the body), "
          f"held +{held:.0f} MiB ({held / size:.1f}x)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bodies", type=int, default=64, help="512-span bodies per timed pass")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--spans", type=int, default=51_200, help="spans in the request whose memory is measured")
    p.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_child:
        memory(args.spans)
        return 0
    print(f"{otlp_native.NAME} decoder, load {os.getloadavg()[0]:.2f}")
    speed(args.bodies, args.repeats)
    subprocess.run([sys.executable, __file__, "--memory-child", "--spans", str(args.spans)], check=True)
    print(f"load after {os.getloadavg()[0]:.2f}; reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
