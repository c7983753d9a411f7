"""How long an idle daemon takes to ack one body, and where that time goes.

One client sends ``--bodies`` requests one at a time over a keep-alive connection to a fresh daemon, with a
pause between them (the daemon is idle when each arrives): 512-span bodies of the ingest benchmark, then
1-span bodies. Reported: ack p50/p99 for each, the writer's mean commit time (``/metrics``), and the
decoder's time for one 512-span body in this process; what is left of the ack is the HTTP stack and the
hand-offs between the event loop, the decoding thread and the writer.

Not a timed test: run by hand. Everything it starts is stopped in ``finally``; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import _common as common

from lousho.observe.client.process import DaemonProcess, start_daemon
from lousho.observe.decode import otlp_native


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def acks(daemon: DaemonProcess, bodies: list[bytes], pause_s: float) -> tuple[list[float], float]:
    """Ack latencies (s), and the mean commit (s) over these requests."""
    parts = urllib.parse.urlsplit(daemon.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def metrics() -> str:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()

    try:
        before = metrics()
        latencies = []
        for body in bodies:
            started = time.perf_counter()
            conn.request("POST", "/v1/traces", body, {"content-type": "application/x-protobuf"})
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - started)
            if response.status != 200:
                raise RuntimeError(f"the daemon answered {response.status}")
            time.sleep(pause_s)
        after = metrics()
    finally:
        conn.close()
    commits = _metric(after, "lousho_commits_total") - _metric(before, "lousho_commits_total")
    spent = _metric(after, "lousho_commit_seconds_sum") - _metric(before, "lousho_commit_seconds_sum")
    return latencies, spent / commits if commits else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bodies", type=int, default=100, help="requests of each size (the first 10 warm up)")
    p.add_argument("--pause", type=float, default=0.05, help="seconds between requests")
    args = p.parse_args(argv)
    templates = common.templates(4, 11, 512)
    large = [templates[i % 4].stamp() for i in range(args.bodies)]
    small = [common.templates(1, 12 + i, 2)[0].stamp() for i in range(args.bodies)]
    decode = otlp_native.protobuf_decoder()
    decode(large[0])
    started = time.perf_counter()
    for body in large[:20]:
        decode(body)
    decode_ms = (time.perf_counter() - started) / 20 * 1e3
    with tempfile.TemporaryDirectory(prefix="lousho-ack-") as tmp:
        daemon = start_daemon(Path(tmp) / "observe.duckdb")
        try:
            rows = []
            for label, bodies in (("512-span body", large), ("2-span body", small)):
                latencies, commit_s = acks(daemon, bodies, args.pause)
                measured = latencies[10:]
                rows.append((label, common.percentile(measured, 50) * 1e3, common.percentile(measured, 99) * 1e3,
                             commit_s * 1e3))
        finally:
            daemon.stop()
    print(f"idle daemon ({otlp_native.NAME} decoder), one request at a time; load {os.getloadavg()[0]:.2f}")
    for label, p50, p99, commit_ms in rows:
        print(f"  {label:14} ack p50 {p50:6.1f} ms  p99 {p99:6.1f} ms   writer's commit mean {commit_ms:5.1f} ms")
    print(f"  decoding one 512-span body in this process: {decode_ms:.1f} ms")
    print(f"reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
