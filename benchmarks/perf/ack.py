"""How long an idle daemon takes to ack one body, beside the disk's sync of the same bytes.

One client sends ``--bodies`` requests one at a time to a fresh daemon, with a pause between them (the
daemon is idle when each arrives): 512-span bodies of the ingest benchmark, then 2-span bodies, over
OTLP/HTTP (keep-alive) and over gRPC (a raw unary call to the Export method, the body sent as is). The
daemon acks once the body is appended to its spool and ``fdatasync``-ed; the loader commits to DuckDB
later. The control, measured in the same run with the same pause: the same bodies appended to a file in the
DB's directory and ``os.fdatasync``-ed, one at a time, in this process. Reported: ack p50/p99 per protocol
and size, the control's p50/p99, their ratio, and the daemon's mean spool sync (``/metrics``).

Not a timed test: run by hand. Everything it starts is stopped in ``finally``; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shlex
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import _common as common
import grpc

from lousho.observe.client.process import DaemonProcess, start_daemon

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
GOAL_MS = 5.0


def _timed(send: Callable[[bytes], None], bodies: list[bytes], pause_s: float) -> list[float]:
    latencies = []
    for body in bodies:
        started = time.perf_counter()
        send(body)
        latencies.append(time.perf_counter() - started)
        time.sleep(pause_s)
    return latencies


def http_acks(daemon: DaemonProcess, bodies: list[bytes], pause_s: float) -> list[float]:
    parts = urllib.parse.urlsplit(daemon.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def send(body: bytes) -> None:
        conn.request("POST", "/v1/traces", body, {"content-type": "application/x-protobuf"})
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"the daemon answered {response.status}")

    try:
        return _timed(send, bodies, pause_s)
    finally:
        conn.close()


def grpc_acks(daemon: DaemonProcess, bodies: list[bytes], pause_s: float) -> list[float]:
    if not daemon.grpc_target:
        raise RuntimeError("the daemon has no gRPC endpoint")
    with grpc.insecure_channel(daemon.grpc_target) as channel:
        export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        export(bodies[0], timeout=60)  # connect before timing
        return _timed(lambda body: export(body, timeout=60), bodies, pause_s)


def sync_control(directory: Path, bodies: list[bytes], pause_s: float) -> list[float]:
    """Append each body to a file in ``directory`` and fdatasync it, one at a time."""
    path = directory / "control.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        def send(body: bytes) -> None:
            os.write(fd, body)
            os.fdatasync(fd)
        return _timed(send, bodies, pause_s)
    finally:
        os.close(fd)
        path.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bodies", type=int, default=100, help="requests of each size and protocol (first 10 warm up)")
    p.add_argument("--pause", type=float, default=0.05, help="seconds between requests")
    p.add_argument("--daemon-args", default="",
                   help="extra daemon flags, one string (e.g. '--load-interval 30': the loader out of the way)")
    args = p.parse_args(argv)
    templates = common.templates(4, 11, 512)
    sizes = {
        "512-span": lambda: [templates[i % 4].stamp() for i in range(args.bodies)],
        "2-span": lambda: [common.templates(1, 12 + i, 2)[0].stamp() for i in range(args.bodies)],
    }
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="lousho-ack-", dir=os.environ.get("LOUSHO_BENCH_TMP")) as tmp:
        daemon = start_daemon(Path(tmp) / "observe.duckdb", *shlex.split(args.daemon_args))
        try:
            for size, make in sizes.items():
                for protocol, acks in (("http", http_acks), ("grpc", grpc_acks)):
                    bodies = make()
                    before = common.daemon_metrics(daemon.url)
                    ack = acks(daemon, bodies, args.pause)[10:]
                    after = common.daemon_metrics(daemon.url)
                    sync = sync_control(Path(tmp), bodies, args.pause)[10:]
                    syncs = (common.metric_value(after, "lousho_spool_syncs_total")
                             - common.metric_value(before, "lousho_spool_syncs_total"))
                    spent = (common.metric_value(after, "lousho_spool_sync_seconds_sum")
                             - common.metric_value(before, "lousho_spool_sync_seconds_sum"))
                    rows.append({
                        "size": size, "protocol": protocol, "body_kib": len(bodies[0]) / 1024,
                        "ack_p50": common.percentile(ack, 50) * 1e3, "ack_p99": common.percentile(ack, 99) * 1e3,
                        "sync_p50": common.percentile(sync, 50) * 1e3,
                        "sync_p99": common.percentile(sync, 99) * 1e3,
                        "spool_sync_mean": spent / syncs * 1e3 if syncs else float("nan"),
                    })
        finally:
            daemon.stop()
    load_after = os.getloadavg()
    print(f"idle daemon, one request at a time, {args.pause * 1e3:.0f} ms apart, {args.bodies - 10} timed; "
          f"load {load_before[0]:.2f} -> {load_after[0]:.2f}")
    print("  body             proto  ack p50 / p99 ms   fdatasync p50 / p99 ms   ack/sync p50   "
          "daemon's spool sync mean")
    for r in rows:
        label = f"{r['size']} ({r['body_kib']:.0f} KiB)"
        print(f"  {label:16} {r['protocol']:5} {r['ack_p50']:6.2f} / {r['ack_p99']:6.2f}"
              f"      {r['sync_p50']:6.2f} / {r['sync_p99']:6.2f}"
              f"          {r['ack_p50'] / r['sync_p50']:5.2f}x        {r['spool_sync_mean']:6.2f} ms")
    met = all(r["ack_p50"] <= GOAL_MS for r in rows if r["size"] == "512-span")
    print(f"  goal: 512-span ack p50 <= {GOAL_MS:g} ms over HTTP and gRPC: {'met' if met else 'missed'}")
    print(f"reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
