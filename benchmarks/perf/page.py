"""How big and how slow the daemon's page is on a store with many agents and with one huge attribute.

Two cases, each on a fresh daemon: ``--agents`` agents of one run each (sent in a few large OTLP
requests), then ``GET /agents``; one run whose root span holds one ``--attribute-mib`` MiB attribute of
characters HTML must escape (``gen_ai.input.messages``: the run's input too), then ``GET /runs/{id}`` and
the links to the whole value.
Reported per page: median time of ``--repeat`` loads and the bytes of the answer.

Not a timed test: run by hand (``python benchmarks/perf/page.py``). Everything it starts is stopped in
``finally``; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import tempfile
import time
import urllib.parse
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from lousho.observe.client.process import start_daemon

NS = 1_780_000_000_000_000_000


def root_span(run_id: str, agent: str, start: int, **extra: str) -> Span:
    span = Span(trace_id=os.urandom(16), span_id=os.urandom(8), name=f"invoke_agent {agent}",
                kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=start, end_time_unix_nano=start + 1_000_000)
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "lousho.run.id": run_id, **extra}
    span.attributes.extend(KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items())
    return span


def body(spans: list[Span]) -> bytes:
    req = ExportTraceServiceRequest()
    scope = req.resource_spans.add().scope_spans.add()
    scope.spans.extend(spans)
    return req.SerializeToString()


def call(url: str, method: str, path: str, payload: bytes | None = None) -> tuple[int, bytes, float]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    try:
        t0 = time.perf_counter()
        conn.request(method, path, body=payload, headers={"content-type": "application/x-protobuf"})
        response = conn.getresponse()
        data = response.read()
        return response.status, data, time.perf_counter() - t0
    finally:
        conn.close()


def folded(url: str, timeout_s: float = 120.0) -> None:
    """Wait until the runs fold has taken every committed span: the page then reads kept runs, as it does
    on a daemon that is not mid-burst (a tail of unfolded spans costs every reader the same)."""
    query = json.dumps({"query": "SELECT (SELECT watermark FROM runs_fold) >= "
                                 "(SELECT max(commit_seq) FROM spans) AS done"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        conn.request("POST", "/v1/sql", body=query.encode(), headers={"content-type": "application/json"})
        if json.loads(conn.getresponse().read())["rows"][0]["done"]:
            return
        time.sleep(0.2)
    raise TimeoutError("the runs fold did not catch up")


def measure(url: str, path: str, repeat: int) -> tuple[int, float, int]:
    results = [call(url, "GET", path) for _ in range(repeat)]
    return results[0][0], statistics.median(r[2] for r in results), len(results[0][1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=60_000)
    parser.add_argument("--attribute-mib", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        daemon = start_daemon(Path(tmp) / "agents.duckdb")
        try:
            spans = [root_span(f"run-{i}", f"agent-{i:06d}", NS + i) for i in range(args.agents)]
            for i in range(0, len(spans), 10_000):
                assert call(daemon.url, "POST", "/v1/traces", body(spans[i:i + 10_000]))[0] == 200
            folded(daemon.url)
            status, median, size = measure(daemon.url, "/agents", args.repeat)
            print(f"/agents with {args.agents:,} agents: {status}, {size:,} bytes, median {median:.3f} s")
        finally:
            daemon.stop()
        daemon = start_daemon(Path(tmp) / "big.duckdb")
        try:
            value = ('<"&\'' * (args.attribute_mib * 2 ** 18))
            big = body([root_span("big", "big", NS, **{"gen_ai.input.messages": value})])
            assert call(daemon.url, "POST", "/v1/traces", big)[0] == 200
            folded(daemon.url)
            status, median, size = measure(daemon.url, "/runs/big", args.repeat)
            print(f"/runs/big with one {args.attribute_mib} MiB attribute: {status}, {size:,} bytes, "
                  f"median {median:.3f} s")
            page = call(daemon.url, "GET", "/runs/big")[1].decode()
            # The links to the whole value: the span attribute's and the run input's.
            for link in re.findall(r'href="(/(?:spans/[^"]*gen_ai\.input\.messages|runs/big\?value=input))"', page):
                full = link.replace("&amp;", "&")
                status, median, size = measure(daemon.url, full, args.repeat)
                print(f"{full}: {status}, {size:,} bytes, median {median:.3f} s")
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
