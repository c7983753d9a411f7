"""What a daemon spends following one agent that exports each span as it ends: a trickle of one-span requests.

A real daemon on a new store receives ``--rate`` requests a second, each one span of a run (lousho's own agent
exports this way, as does any SDK with a ``SimpleSpanProcessor``), for ``--seconds``. Reported: the daemon's CPU
over the trickle (from /proc), its folds (``lousho_folds_total``), and beside them, in the same run, the CPU of the
same daemon left idle for as long: the floor.

    .venv/bin/python benchmarks/perf/trickle.py [--rate 5] [--seconds 20] [--repeats 3]

Run it with ``PYTHONPATH`` set to another checkout to measure that tree's daemon the same way.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import _common as common
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

import lousho
from lousho.observe.client.process import start_daemon


def _body(index: int) -> bytes:
    """One span of run ``index // 10`` (a run of ten model calls), as its own request."""
    now = time.time_ns()
    span = Span(trace_id=os.urandom(16), span_id=os.urandom(8), name="chat scripted", kind=Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=now - 1_000_000, end_time_unix_nano=now,
                attributes=[common.kv("gen_ai.operation.name", "chat"), common.kv("gen_ai.request.model", "m"),
                            common.kv("lousho.run.id", f"trickle-{index // 10}")])
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=Resource(attributes=[common.kv("service.name", "trickle")]),
        scope_spans=[ScopeSpans(spans=[span])])])
    return request.SerializeToString()


def _post(url: str, body: bytes) -> None:
    request = urllib.request.Request(f"{url}/v1/traces", data=body, method="POST",
                                     headers={"content-type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200, reply.status


def measure(rate: float, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lousho-trickle-") as work:
        daemon = start_daemon(Path(work) / "o.duckdb")
        try:
            time.sleep(1.0)  # past the start's own work
            before = common.proc_cpu_s(daemon.process.pid)
            time.sleep(seconds)
            idle = common.proc_cpu_s(daemon.process.pid) - before
            folds = common.metric_value(common.daemon_metrics(daemon.url), "lousho_folds_total")
            before = common.proc_cpu_s(daemon.process.pid)
            started = time.monotonic()
            for i in range(int(rate * seconds)):
                time.sleep(max(0.0, started + i / rate - time.monotonic()))
                _post(daemon.url, _body(i))
            time.sleep(max(0.0, started + seconds - time.monotonic()))
            busy = common.proc_cpu_s(daemon.process.pid) - before
            folds = common.metric_value(common.daemon_metrics(daemon.url), "lousho_folds_total") - folds
        finally:
            daemon.stop()
    return {"idle_cpu_s": idle, "trickle_cpu_s": busy, "folds": folds, "requests": int(rate * seconds)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=5.0, help="one-span requests a second")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    print(f"a daemon following {args.rate:g} one-span requests a second for {args.seconds:g} s; "
          f"load {os.getloadavg()[0]:.2f}; lousho from {Path(lousho.__file__).resolve().parent}")
    rows = [measure(args.rate, args.seconds) for _ in range(args.repeats)]
    for row in rows:
        print(f"  {row['requests']} requests: {row['trickle_cpu_s']:.2f} s of CPU "
              f"({row['trickle_cpu_s'] / args.seconds:.1%} of a core), {row['folds']:.0f} folds; "
              f"idle as long: {row['idle_cpu_s']:.2f} s")
    trickle = common.median([r["trickle_cpu_s"] for r in rows])
    idle = common.median([r["idle_cpu_s"] for r in rows])
    print(f"median: {trickle / args.seconds:.1%} of a core following the trickle, {idle / args.seconds:.1%} idle, "
          f"{common.median([r['folds'] for r in rows]):.0f} folds; load {os.getloadavg()[0]:.2f}")
    print(f"reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
