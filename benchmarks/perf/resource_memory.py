"""Peak daemon memory for one request whose spans share a large resource (1 MiB attribute, 2,100 spans).

A fresh daemon over a temp DuckDB file stores one small request of the same shape first (its first insert
allocates what later ones reuse), then gets the large one: the figure is the growth of the daemon's peak
resident set (VmHWM) across it, with the answer's status. Each resource is stored once per distinct resource
(schema migration 5), so the growth is about the body, not the body times the spans.

Not a timed test: run by hand (``--repeats`` fresh daemons, median). Traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from daemon_support import post  # noqa: E402

from lousho.observe.client.process import start_daemon  # noqa: E402


def body(spans: int, resource_bytes: int) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend([KeyValue(key="service.name", value=AnyValue(string_value="big-resource")),
                                   KeyValue(key="big", value=AnyValue(string_value="r" * resource_bytes))])
    trace_id = os.urandom(16)
    rs.scope_spans.add().spans.extend(
        Span(trace_id=trace_id, span_id=os.urandom(8), name="chat", start_time_unix_nano=1, end_time_unix_nano=2)
        for _ in range(spans))
    return req.SerializeToString()


def vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def once(spans: int, resource_bytes: int) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        daemon = start_daemon(Path(tmp) / "o.duckdb")
        try:
            post(daemon.url, "/v1/traces", body(10, resource_bytes), "application/x-protobuf")
            before = vm_hwm(daemon.pid)
            status = post(daemon.url, "/v1/traces", body(spans, resource_bytes), "application/x-protobuf").status
            return status, vm_hwm(daemon.pid) - before
        finally:
            daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=2_100)
    parser.add_argument("--resource-mib", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    size = len(body(args.spans, int(args.resource_mib * 2**20)))
    results = [once(args.spans, int(args.resource_mib * 2**20)) for _ in range(args.repeats)]
    growth = [g / 2**20 for _, g in results]
    print(f"body {size / 2**20:.2f} MiB, {args.spans} spans: statuses {[s for s, _ in results]}, "
          f"peak growth MiB {[round(g) for g in growth]}, median {statistics.median(growth):.0f} MiB")


if __name__ == "__main__":
    main()
