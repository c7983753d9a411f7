"""OTLP/JSON decoding against OTLP/protobuf on the same spans, one core, and JSON ingest end to end.

The bodies are ingest.py's (512 spans of agent runs), written as OTLP/JSON the way the JS SDK's
``exporter-trace-otlp-http`` writes them: hex ids, integer enums, 64-bit integers as strings. Reported, in
spans/s of CPU time on one core: the reference ``otlp_decode.decode_json``, the daemon's native JSON path
(transcoding to protobuf, then the native decoder), the transcoding alone, and the native protobuf decoder
on the same spans as protobuf.

``--seconds`` > 0 also runs a fresh daemon and ``--clients`` threads posting the JSON bodies with fresh ids
over keep-alive, each waiting for its 200, and reports the spans committed per second.

A benchmark to run by hand: ``python benchmarks/perf/json_decode.py [--json]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as common
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from lousho.observe import _otlp_json
from lousho.observe.client.process import start_daemon
from lousho.observe.decode import otlp_decode, otlp_json_native, otlp_native
from lousho.observe.store.span_store import arrow_batch

_IDS = re.compile(rb'"(traceId|spanId|parentSpanId)": ?"([0-9a-f]+)"')


def as_json(body: bytes) -> bytes:
    """A protobuf request as the JS exporter writes it in JSON."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    doc = json_format.MessageToDict(request, use_integers_for_enums=True)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = json_format.base64.b64decode(span[key]).hex()
    return json.dumps(doc, separators=(",", ":")).encode()


def rate(fn: Callable[[bytes], Any], bodies: list[bytes], spans: int, min_seconds: float) -> float:
    """Spans per CPU second of ``fn`` over the bodies, best of three passes of at least ``min_seconds``."""
    fn(bodies[0])
    best = 0.0
    for _ in range(3):
        passes, started = 0, time.process_time()
        while True:
            for body in bodies:
                fn(body)
            passes += 1
            spent = time.process_time() - started
            if spent >= min_seconds:
                break
        best = max(best, passes * spans / spent)
    return best


def fresh_ids(body: bytes, mapping: dict[bytes, bytes]) -> bytes:
    """The JSON body with every id replaced by a random one, consistently (a parent keeps pointing at it)."""

    def swap(match: re.Match[bytes]) -> bytes:
        old = match.group(2)
        new = mapping.get(old)
        if new is None:
            new = mapping[old] = os.urandom(len(old) // 2).hex().encode()
        return b'"' + match.group(1) + b'":"' + new + b'"'

    return _IDS.sub(swap, body)


def ingest(bodies: list[bytes], spans_per_body: int, clients: int, seconds: float) -> dict[str, float]:
    """Spans committed per second by a fresh daemon, ``clients`` threads posting JSON bodies with fresh ids."""
    with tempfile.TemporaryDirectory() as tmp:
        daemon = start_daemon(Path(tmp) / "observe.duckdb")
        try:
            url = urllib.parse.urlsplit(daemon.url)
            acked = [0] * clients
            deadline = time.monotonic() + seconds

            def client(index: int) -> None:
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
                n = 0
                while time.monotonic() < deadline:
                    body = fresh_ids(bodies[n % len(bodies)], {})
                    n += 1
                    conn.request("POST", "/v1/traces", body, {"Content-Type": "application/json"})
                    reply = conn.getresponse()
                    reply.read()
                    if reply.status == 200:
                        acked[index] += spans_per_body
                conn.close()

            started = time.monotonic()
            threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - started
            query = json.dumps({"query": "SELECT count(*) AS n FROM spans"}).encode()
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            conn.request("POST", "/v1/sql", query, {"Content-Type": "application/json"})
            stored = json.loads(conn.getresponse().read())["rows"][0]["n"]
            return {"json_ingest_spans_per_s": stored / elapsed, "acked_spans": sum(acked), "stored_spans": stored,
                    "daemon_ready_line": daemon.output[0]}
        finally:
            daemon.stop()


def _rows(decoded: otlp_decode.Decoded) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """The span and score rows the store would insert: what the two decoders must agree on."""
    batch = arrow_batch(decoded)
    return batch.spans.to_pydict(), batch.scores.to_pydict()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bodies", type=int, default=4, help="distinct 512-span bodies")
    p.add_argument("--min-seconds", type=float, default=1.0, help="CPU seconds per pass")
    p.add_argument("--seconds", type=float, default=8.0, help="end-to-end JSON ingest; 0 skips it")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = p.parse_args()
    templates = common.templates(args.bodies, args.seed)
    protobuf = [t.stamp() for t in templates]
    spans = sum(t.span_count for t in templates)
    bodies = [as_json(b) for b in protobuf]
    assert all(_rows(otlp_json_native.decode_json(b)) == _rows(otlp_decode.decode_json(b)) for b in bodies)
    doc: dict[str, Any] = {
        "command": common.reproduce_command(),
        "loadavg_before": Path("/proc/loadavg").read_text().strip(),
        "json_bytes_per_span": sum(map(len, bodies)) / spans,
        "protobuf_bytes_per_span": sum(map(len, protobuf)) / spans,
        "reference_decode_json_spans_per_s": rate(otlp_decode.decode_json, bodies, spans, args.min_seconds),
        "native_json_spans_per_s": rate(otlp_json_native.decode_json, bodies, spans, args.min_seconds),
        "transcode_only_spans_per_s": rate(_otlp_json.transcode, bodies, spans, args.min_seconds),
        "native_protobuf_spans_per_s": rate(otlp_native.decode_protobuf, protobuf, spans, args.min_seconds),
        "json_paths": otlp_json_native.path_counts(),
    }
    if args.seconds > 0:
        doc.update(ingest(bodies, templates[0].span_count, args.clients, args.seconds))
    doc["loadavg_after"] = Path("/proc/loadavg").read_text().strip()
    if args.json:
        common.emit_json(doc)
    else:
        for key, value in doc.items():
            print(f"{key:36} {value:,.0f}" if isinstance(value, float) else f"{key:36} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
