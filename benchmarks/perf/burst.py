"""A burst from one agent process through the OTel Python SDK at its defaults: are all its spans stored?

The SDK's ``BatchSpanProcessor`` (queue 2,048, batches of 512, one export at a time) drops spans without a
word when its queue is full, which happens when the receiver acks slowly. One child process (the agent)
creates ``--spans`` GenAI spans as fast as it can (an ``invoke_agent`` root with ``chat`` and
``execute_tool`` children, as ``lousho.observe.client.workload`` sends), exports them with the OTLP/HTTP exporter
and then, from a second process, the gRPC exporter, each at the SDK's defaults (no ``OTEL_BSP_*``
variable reaches it), and shuts its provider down (the last batch is flushed). The daemon's ``spans``
table is then counted per service. Reported per repeat: spans created, stored, lost, how long creating
took, and the machine's load average; medians over ``--repeats``.

The same bursts also go to a control receiver (``--control``, on by default): an HTTP and a gRPC server in
this process that ack every request at once and store nothing, so what the SDK delivers to it is the most
any receiver could store; what it loses, the SDK dropped on its own (its encoder runs in the agent's
process, on the agent's GIL).

Not a timed test: run by hand. Everything it starts is stopped in ``finally``; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import _common as common
import grpc

from lousho.observe.client.process import DaemonProcess, start_daemon
from lousho.observe.decode.otlp_decode import decode_protobuf

GOAL = 20_000
PROTOCOLS = ("http/protobuf", "grpc")


def child(protocol: str, endpoint: str, service: str, spans: int) -> None:
    """The agent: one process, the SDK at its defaults. Prints what it did as one JSON line."""
    from opentelemetry.trace import SpanKind

    from lousho.observe import instrument

    provider = instrument(service, endpoint, protocol=protocol)  # type: ignore[arg-type]
    tracer = provider.get_tracer("lousho.burst")
    started = time.perf_counter()
    made = 0
    run = 0
    while made < spans:
        with tracer.start_as_current_span(f"invoke_agent coder-{run % 4}", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"coder-{run % 4}",
            "gen_ai.provider.name": "openai", "lousho.run.id": f"{service}-{run}",
        }):
            made += 1
            for step in range(2):
                if made >= spans:
                    break
                with tracer.start_as_current_span("chat gpt-test", kind=SpanKind.CLIENT, attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-test", "gen_ai.usage.input_tokens": 1200 + step,
                    "gen_ai.usage.output_tokens": 80,
                }):
                    made += 1
                if made >= spans:
                    break
                with tracer.start_as_current_span("execute_tool read_file", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                }):
                    made += 1
        run += 1
    created_s = time.perf_counter() - started
    provider.shutdown()
    print(json.dumps({"created": made, "create_seconds": created_s,
                      "flushed_seconds": time.perf_counter() - started}), flush=True)


class Control:
    """Acks every export at once and keeps the bodies: the SDK's own ceiling."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        control = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                control.bodies.append(self.rfile.read(int(self.headers.get("content-length", "0"))))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"

        def export(body: bytes, context: Any) -> bytes:
            control.bodies.append(body)
            return b""

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
        self._grpc.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}),))
        self.grpc_target = f"127.0.0.1:{self._grpc.add_insecure_port('127.0.0.1:0')}"
        self._grpc.start()

    def take_count(self) -> int:
        count = sum(decode_protobuf(body).span_count for body in self.bodies)
        self.bodies.clear()
        return count

    def stop(self) -> None:
        self._http.shutdown()
        self._grpc.stop(grace=None)


def one_burst(daemon: DaemonProcess | Control, protocol: str, service: str, spans: int) -> dict[str, Any]:
    endpoint = daemon.url if protocol == "http/protobuf" else f"http://{daemon.grpc_target}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_BSP_", "OTEL_EXPORTER_"))}
    load_before = os.getloadavg()[0]
    out = subprocess.run([sys.executable, __file__, "--child", protocol, endpoint, service, str(spans)],
                         capture_output=True, text=True, env=env, timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the agent process failed: {out.stderr[-2000:]}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # The SDK flushed at shutdown and each export was acked after its commit: the count is final, but
    # read it until it stands still anyway, in case an export is retried after a 503.
    count, deadline = -1, time.monotonic() + 30
    while isinstance(daemon, DaemonProcess) and time.monotonic() < deadline:
        now = _count(daemon, service)
        if now == count:
            break
        count = now
        time.sleep(1.0)
    if isinstance(daemon, Control):
        count = daemon.take_count()
    return {"protocol": protocol, "created": report["created"], "stored": count,
            "lost": report["created"] - count, "create_seconds": round(report["create_seconds"], 3),
            "flush_seconds": round(report["flushed_seconds"], 3), "load_1m_before": load_before,
            "load_1m_after": os.getloadavg()[0]}


def _count(daemon: DaemonProcess, service: str) -> int:
    query = json.dumps({"query": "SELECT count(*) AS n FROM spans WHERE service_name = ?",
                        "params": [service]}).encode()
    request = urllib.request.Request(f"{daemon.url}/v1/sql", data=query,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return int(json.loads(response.read())["rows"][0]["n"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spans", type=int, default=GOAL, help="spans per burst")
    p.add_argument("--repeats", type=int, default=3, help="bursts per exporter; medians are quoted")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--no-control", dest="control", action="store_false",
                   help="skip the bursts to the instant-ack control receiver")
    p.add_argument("--child", nargs=4, metavar=("PROTOCOL", "ENDPOINT", "SERVICE", "SPANS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        protocol, endpoint, service, spans = args.child
        child(protocol, endpoint, service, int(spans))
        return 0
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lousho-burst-") as tmp:
        daemon = start_daemon(Path(tmp) / "observe.duckdb")
        try:
            decoder = next((part.split("=", 1)[1] for line in daemon.output for part in line.split()
                            if part.startswith("decoder=")), "unknown")
            common.say(args.json, f"daemon up ({decoder} decoder); {args.spans:,} spans per burst")
            for repeat in range(args.repeats):
                for protocol in PROTOCOLS:
                    result = one_burst(daemon, protocol, f"burst-{protocol.split('/')[0]}-{repeat}", args.spans)
                    results.append(result)
                    common.say(args.json, f"  {protocol:13} created {result['created']:,} stored {result['stored']:,} "
                               f"lost {result['lost']:,} (created in {result['create_seconds']} s, flushed at "
                               f"{result['flush_seconds']} s; load {result['load_1m_before']:.2f})")
        finally:
            daemon.stop()
    controls: list[dict[str, Any]] = []
    if args.control:
        control = Control()
        try:
            for repeat in range(args.repeats):
                for protocol in PROTOCOLS:
                    result = one_burst(control, protocol, f"control-{repeat}", args.spans)
                    controls.append(result)
                    common.say(args.json, f"  control {protocol:13} created {result['created']:,} delivered "
                               f"{result['stored']:,} dropped by the SDK {result['lost']:,} "
                               f"(load {result['load_1m_before']:.2f})")
        finally:
            control.stop()

    def medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {protocol: {"stored_median": common.median([r["stored"] for r in rows if r["protocol"] == protocol]),
                           "lost_median": common.median([r["lost"] for r in rows if r["protocol"] == protocol])}
                for protocol in PROTOCOLS}

    summary = medians(results)
    doc = {"spans_per_burst": args.spans, "decoder": decoder, "bursts": results, "summary": summary,
           "control_bursts": controls, "control_summary": medians(controls) if controls else None,
           "goal": f"{args.spans:,} stored each time", "command": common.reproduce_command()}
    if args.json:
        common.emit_json(doc)
    else:
        for protocol, row in summary.items():
            ceiling = doc["control_summary"][protocol]["stored_median"] if controls else float("nan")
            print(f"{protocol:13} stored median {row['stored_median']:,.0f} of {args.spans:,} "
                  f"(lost median {row['lost_median']:,.0f}); the instant-ack control got {ceiling:,.0f}")
    return 0 if all(r["lost"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
