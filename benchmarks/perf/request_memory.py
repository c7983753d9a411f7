"""Peak daemon memory per in-flight request, as a multiple of its (decompressed) body.

Two figures, each on fresh daemons over temp DuckDB files:

* **first request**: a daemon that has stored one small (512-span) request gets one large request
  (``--spans`` spans: 512-span bodies of the ingest benchmark concatenated, which protobuf reads as one
  request), sent once plain and once gzip-compressed. The figure is the growth of the daemon's peak resident
  set (VmHWM) across the request, divided by the decompressed body size. It includes what DuckDB allocates
  once for its first large insert (its buffer pool, which later requests reuse).
* **marginal, warm**: a daemon that has stored one large request of the same size gets ``K`` = 1, 2, 4 such
  requests (fresh ids each, so none is a duplicate) sent together, held in flight at once. The figure is the
  slope of the peak's growth over ``K`` (least squares), divided by the body size: what one more request in
  flight costs once the store is warm. The same K requests sent one after another give the control: what
  storing one more such request costs (DuckDB keeps the rows it inserted in memory until a checkpoint, and
  its index and allocator keep what they grew); the gap between the two is what holding a request costs.

``--decoder python`` runs the daemon from a copy of the source tree without the built native module, as a
checkout that was not built would.

Not a timed test: run by hand. Everything it starts is stopped in ``finally``; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import _common as common
import numpy as np
from hostile_bodies import tiny_spans_body

from lousho.observe.client.process import DaemonProcess, start_daemon

CONCURRENCY = (1, 2, 4)


def post(url: str, body: bytes, encoding: str | None) -> int:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    headers = {"content-type": "application/x-protobuf"}
    if encoding:
        headers["content-encoding"] = encoding
    try:
        conn.request("POST", "/v1/traces", body, headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def post_together(url: str, bodies: list[bytes]) -> list[int]:
    """Send ``bodies`` at once, one connection each; the answers once all are in."""
    statuses = [0] * len(bodies)
    start = threading.Barrier(len(bodies))

    def send(i: int) -> None:
        start.wait()
        statuses[i] = post(url, bodies[i], None)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def daemon_env(decoder: str, workdir: Path) -> dict[str, str]:
    if decoder != "python":
        return {}
    tree = workdir / "src"
    if not tree.exists():
        shutil.copytree(common.REPO / "lousho", tree / "lousho", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}


def with_daemon(decoder: str, workdir: Path, name: str, run: Callable[[DaemonProcess], float]) -> float:
    db = workdir / f"memory-{name}-{decoder}.duckdb"
    daemon = start_daemon(db, env=daemon_env(decoder, workdir))
    try:
        assert f"decoder={decoder}" in daemon.output[0], daemon.output[0]
        return run(daemon)
    finally:
        try:
            daemon.stop()
        except subprocess.TimeoutExpired:  # seen with the red-team body: say so, and do not leave it running
            print("    (the daemon did not stop within 60 s of SIGTERM; killed)", flush=True)
            daemon.kill()
        for path in workdir.glob(db.name + "*"):  # the file, its WAL, its spool directory
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def peak(daemon: DaemonProcess) -> float:
    return common.peak_rss_mib(daemon.pid) or 0.0


def loaded(daemon: DaemonProcess, timeout: float = 120.0) -> None:
    """Wait until the loader has loaded every acked request: bodies are acked from the spool and decoded
    by the loader afterwards, so the peak must be read once it is done with them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = common.daemon_metrics(daemon.url)
        if "lousho_loader_lag_seconds" in text and common.metric_value(text, "lousho_loader_lag_seconds") == 0.0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the loader had not caught up after {timeout:g} s")


def first_request(body: bytes, warm: bytes, encoding: str | None, decoder: str, workdir: Path) -> dict[str, float]:
    sent = gzip.compress(body, 1) if encoding == "gzip" else body
    seen: dict[str, float] = {}

    def run(daemon: DaemonProcess) -> float:
        assert post(daemon.url, warm, None) == 200
        seen["before"] = peak(daemon)
        if (status := post(daemon.url, sent, encoding)) != 200:
            raise RuntimeError(f"the daemon answered {status}")
        seen["at_ack"] = peak(daemon)
        loaded(daemon)
        seen["after"] = peak(daemon)
        return seen["after"] - seen["before"]

    growth = with_daemon(decoder, workdir, encoding or "plain", run) * 2**20
    return {"body_mib": len(body) / 2**20, "wire_mib": len(sent) / 2**20, "peak_before_mib": seen["before"],
            "peak_at_ack_mib": seen["at_ack"], "peak_after_mib": seen["after"],
            "growth_per_body_byte": growth / len(body)}


def in_flight(make_body: Callable[[], bytes], decoder: str, workdir: Path, together: bool) -> dict[str, object]:
    """Peak growth with K requests in flight together (else sent one after another) on a warm daemon, and its
    slope per request."""
    growth: dict[int, float] = {}
    size = 0
    for k in CONCURRENCY:
        bodies = [make_body() for _ in range(k + 1)]
        size = len(bodies[0])

        def run(daemon: DaemonProcess, bodies: list[bytes] = bodies) -> float:
            assert post(daemon.url, bodies[0], None) == 200  # the warm-up: DuckDB's first large insert
            loaded(daemon)
            before = peak(daemon)
            if together:
                statuses = post_together(daemon.url, bodies[1:])
            else:
                statuses = [post(daemon.url, body, None) for body in bodies[1:]]
            if set(statuses) != {200}:
                raise RuntimeError(f"the daemon answered {statuses}")
            loaded(daemon)
            return peak(daemon) - before

        growth[k] = with_daemon(decoder, workdir, f"k{k}-{together}", run)
    slope = float(np.polyfit(list(growth), list(growth.values()), 1)[0])
    return {"body_mib": size / 2**20, "growth_mib": growth, "slope_mib": slope,
            "slope_per_body_byte": slope * 2**20 / size}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spans", type=int, default=None,
                   help="spans in the large request (workload: a multiple of 512, default 51,200; tiny: 200,000)")
    p.add_argument("--body", choices=["workload", "tiny"], default="workload",
                   help="workload: the ingest benchmark's 512-span bodies concatenated; tiny: issue 28's red-team "
                        "shape (spans of ids, a name and two times, 51 bytes each)")
    p.add_argument("--decoder", choices=["native", "python"], default="native")
    p.add_argument("--only", choices=["first", "marginal"], help="measure only one of the two figures")
    args = p.parse_args(argv)
    templates = common.templates(4, 3, 512)
    args.spans = args.spans or (200_000 if args.body == "tiny" else 51_200)
    made = itertools.count()

    def make_body() -> bytes:
        if args.body == "tiny":  # distinct ids in every body, so none is a duplicate
            return tiny_spans_body(args.spans, 1 + next(made) * args.spans)
        return b"".join(templates[i % 4].stamp() for i in range(args.spans // 512))

    body = make_body()
    warm = templates[0].stamp()
    print(f"{args.body} requests of {args.spans:,} spans, {len(body) / 2**20:.1f} MiB; {args.decoder} decoder; "
          f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="lousho-memory-") as tmp:
        if args.only != "marginal":
            print("  first large request to a fresh daemon (after one 512-span request):")
            for encoding in (None, "gzip"):
                r = first_request(body, warm, encoding, args.decoder, Path(tmp))
                print(f"    {encoding or 'identity':8} wire {r['wire_mib']:.1f} MiB: peak RSS "
                      f"{r['peak_before_mib']:.0f} -> {r['peak_at_ack_mib']:.0f} at the ack -> "
                      f"{r['peak_after_mib']:.0f} MiB once loaded, "
                      f"{r['growth_per_body_byte']:.1f}x the decompressed body")
        if args.only != "first":
            print("  K requests on a warm daemon (after one of the same size):")
            for together in (True, False):
                r = in_flight(make_body, args.decoder, Path(tmp), together)
                growth = ", ".join(f"K={k}: +{g:.0f}" for k, g in r["growth_mib"].items())
                print(f"    {'in flight together' if together else 'one after another'}: peak growth MiB {growth}; "
                      f"per request {r['slope_mib']:.0f} MiB, {r['slope_per_body_byte']:.1f}x the body")
    print(f"load after {os.getloadavg()[0]:.2f}; reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
