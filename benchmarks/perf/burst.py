"""A burst from one agent process through the OTel Python SDK: are all its spans stored?

The SDK's ``BatchSpanProcessor`` at its defaults (queue 2,048, batches of 512, one export at a time) drops
spans without a word when its queue is full, which happens in a burst even when the receiver acks at once.
One child process (the agent) creates ``--spans`` GenAI spans as fast as it can (an ``invoke_agent`` root
with ``chat`` and ``execute_tool`` children, as ``lousho.observe.client.workload`` sends), exports them with
the OTLP/HTTP exporter and then, from a second process, the gRPC exporter, and shuts its provider down (the
last batch is flushed). Three ways to set the SDK up, each a mode:

- ``sdk-defaults``: a plain ``BatchSpanProcessor``, no ``OTEL_BSP_*`` variable reaches it;
- ``helper``: ``lousho.observe.instrument()``, no ``OTEL_BSP_*`` variable reaches it;
- ``documented``: a plain ``BatchSpanProcessor`` with the ``OTEL_BSP_*`` variables docs/observe.md tells
  users to export (``BATCH_SETTINGS.environment()``; ``tests/observe/test_export_batch.py`` pins the doc to it).

Each burst goes to the daemon, whose ``spans`` table is then counted per service, and the same burst to a
control receiver: an HTTP and a gRPC server in this process that ack every request at once and store
nothing, so what the SDK delivers to it is the most any receiver could store; what it loses, the SDK
dropped on its own (its encoder runs in the agent's process, on the agent's GIL). Reported per burst:
spans created, stored, lost, how deep the SDK's queue was when the burst ended, how many exports the SDK
made and how long one took (its encoding, the request and the wait for the answer), how long creating took,
and the machine's load average; medians over ``--repeats``, beside the goals: at the SDK's defaults the
daemon stores at least 97% of what the control got; with the helper or the documented variables, every
span, each time. A burst's count moves by whole exports (512 spans, 4% of the control's), so the share at the
defaults comes with a paired bootstrap interval: at 11 repeats it spans about 10 points, at 41 about 6; judge
the goal on 41 (``--repeats 41 --modes sdk-defaults``, about 6 minutes).
First, in this process, what one span of the burst costs while it waits in the queue.

Not a timed test: run by hand. Everything it starts is stopped in ``finally``; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.request
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import _common as common
import grpc
import numpy as np

from lousho.observe.client.export import BATCH_SETTINGS
from lousho.observe.client.process import DaemonProcess, start_daemon
from lousho.observe.decode.otlp_decode import decode_protobuf

GOAL = 20_000
PROTOCOLS = ("http/protobuf", "grpc")
MODES = ("sdk-defaults", "helper", "documented")
# The share of the control's spans the daemon must store when the SDK runs at its defaults.
DEFAULTS_GOAL = 0.97
# One burst's count moves by whole exports of 512 spans (4% of the control's), so a share of medians over a few
# repeats swings by several points between runs of the same tree: the share is quoted with a bootstrap interval.
BOOTSTRAP_RESAMPLES = 10_000


def _provider(mode: str, protocol: str, endpoint: str, service: str) -> Any:
    """The agent's TracerProvider: lousho's helper, or a plain SDK setup as a user would write it."""
    if mode == "helper":
        from lousho.observe import instrument

        return instrument(service, endpoint, protocol=protocol)  # type: ignore[arg-type]
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        exporter: Any = Grpc(endpoint=endpoint.split("://", 1)[-1], insecure=True)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

        exporter = Http(endpoint=f"{endpoint}/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter))  # reads OTEL_BSP_* from the environment
    return provider


def make_spans(tracer: Any, service: str, spans: int) -> int:
    """The burst: ``spans`` GenAI spans, as fast as this process can make them. Returns how many it made."""
    from opentelemetry.trace import SpanKind

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
    return made


def child(mode: str, protocol: str, endpoint: str, service: str, spans: int) -> None:
    """The agent: one process. Prints what it did as one JSON line."""
    provider = _provider(mode, protocol, endpoint, service)
    batcher = provider._active_span_processor._span_processors[0]._batch_processor
    # The SDK's queue, read once when the burst ends: how much of the burst was still waiting to be sent.
    queue = batcher._queue
    # Each export timed (the SDK's encoding, the request and the wait for its answer): what a receiver's ack
    # costs the agent, beside the control's.
    exporter, export_seconds = batcher._exporter, []
    export = exporter.export

    def timed_export(batch: Any) -> Any:
        started = time.perf_counter()
        try:
            return export(batch)
        finally:
            export_seconds.append(time.perf_counter() - started)

    exporter.export = timed_export
    tracer = provider.get_tracer("lousho.burst")
    started = time.perf_counter()
    made = make_spans(tracer, service, spans)
    created_s = time.perf_counter() - started
    queued = len(queue)
    provider.shutdown()
    print(json.dumps({"created": made, "create_seconds": created_s, "queued_at_end": queued,
                      "flushed_seconds": time.perf_counter() - started, "exports": len(export_seconds),
                      "export_ms_p50": common.median(export_seconds) * 1e3 if export_seconds else None}), flush=True)


def queued_span_bytes(spans: int) -> float:
    """What one span of the burst costs while it waits in the SDK's queue: the burst's spans, each kept as
    the queue keeps it (the ended ``ReadableSpan``), the Python heap's growth per span (tracemalloc)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    class Keep(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.spans.append(span)

    keep = Keep()
    provider = TracerProvider(resource=Resource.create({"service.name": "burst-memory"}))
    provider.add_span_processor(keep)
    tracer = provider.get_tracer("lousho.burst")
    make_spans(tracer, "warm-up", 1_000)  # first-use allocations (attribute interning, caches) left out
    keep.spans.clear()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make_spans(tracer, "burst-memory", spans)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(keep.spans) == made
    return grown / made


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


def one_burst(receiver: DaemonProcess | Control, mode: str, protocol: str, service: str,
              spans: int) -> dict[str, Any]:
    endpoint = receiver.url if protocol == "http/protobuf" else f"http://{receiver.grpc_target}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_BSP_", "OTEL_EXPORTER_"))}
    if mode == "documented":
        env.update(BATCH_SETTINGS.environment())
    load_before = os.getloadavg()[0]
    out = subprocess.run([sys.executable, __file__, "--child", mode, protocol, endpoint, service, str(spans)],
                         capture_output=True, text=True, env=env, timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the agent process failed: {out.stderr[-2000:]}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    if isinstance(receiver, Control):
        count = receiver.take_count()
    else:
        # The SDK flushed at shutdown and each export was acked after its commit: the count is final, but
        # read it until it stands still anyway, in case an export is retried after a 503.
        count, deadline = -1, time.monotonic() + 30
        while time.monotonic() < deadline:
            now = _count(receiver, service)
            if now == count:
                break
            count = now
            time.sleep(1.0)
    return {"mode": mode, "protocol": protocol,
            "receiver": "control" if isinstance(receiver, Control) else "daemon",
            "created": report["created"], "stored": count, "lost": report["created"] - count,
            "queued_at_end": report["queued_at_end"], "create_seconds": round(report["create_seconds"], 3),
            "exports": report["exports"], "export_ms_p50": report["export_ms_p50"],
            "flush_seconds": round(report["flushed_seconds"], 3), "load_1m_before": load_before,
            "load_1m_after": os.getloadavg()[0]}


def _count(daemon: DaemonProcess, service: str) -> int:
    query = json.dumps({"query": "SELECT count(*) AS n FROM spans WHERE service_name = ?",
                        "params": [service]}).encode()
    request = urllib.request.Request(f"{daemon.url}/v1/sql", data=query,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return int(json.loads(response.read())["rows"][0]["n"])


def share_interval(stored: list[int], control: list[int], seed: int = 0) -> tuple[float, float] | None:
    """A 95% percentile-bootstrap interval for median(stored) / median(control), the repeats resampled in
    pairs (a daemon burst and the control burst run next to it share the machine's state); None with fewer
    than 5 pairs."""
    pairs = min(len(stored), len(control))
    if pairs < 5:
        return None
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, pairs, size=(BOOTSTRAP_RESAMPLES, pairs))
    shares = (np.median(np.asarray(stored[:pairs])[picks], axis=1)
              / np.median(np.asarray(control[:pairs])[picks], axis=1))
    low, high = np.percentile(shares, [2.5, 97.5])
    return float(low), float(high)


def summarise(bursts: list[dict[str, Any]], spans: int) -> list[dict[str, Any]]:
    """Per mode and exporter: medians and ranges of the daemon's and the control's counts, and the goal."""
    rows = []
    for mode in MODES:
        for protocol in PROTOCOLS:
            stored = [b["stored"] for b in bursts if (b["mode"], b["protocol"], b["receiver"]) ==
                      (mode, protocol, "daemon")]
            control = [b["stored"] for b in bursts if (b["mode"], b["protocol"], b["receiver"]) ==
                       (mode, protocol, "control")]
            if not stored:
                continue
            export_ms = {receiver: [b["export_ms_p50"] for b in bursts if b["export_ms_p50"] is not None and
                                    (b["mode"], b["protocol"], b["receiver"]) == (mode, protocol, receiver)]
                         for receiver in ("daemon", "control")}
            row: dict[str, Any] = {"mode": mode, "protocol": protocol, "stored_median": common.median(stored),
                                   "export_ms_p50": {k: common.median(v) if v else None for k, v in export_ms.items()},
                                   "stored_range": [min(stored), max(stored)],
                                   "control_median": common.median(control) if control else None,
                                   "control_range": [min(control), max(control)] if control else None}
            if mode == "sdk-defaults":
                row["goal"] = f"stored >= {DEFAULTS_GOAL:.0%} of the control"
                row["share_of_control"] = (row["stored_median"] / row["control_median"]
                                           if row["control_median"] else None)
                row["share_interval_95"] = share_interval(stored, control) if control else None
                # Not judged without the control: the goal is a share of what it got.
                row["met"] = None if row["share_of_control"] is None else row["share_of_control"] >= DEFAULTS_GOAL
            else:
                row["goal"] = f"{spans:,} of {spans:,} each time"
                row["met"] = all(n == spans for n in stored + control)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spans", type=int, default=GOAL, help="spans per burst")
    p.add_argument("--repeats", type=int, default=3, help="bursts per mode and exporter; medians are quoted")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="how the agent sets the SDK up")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--daemon-arg", dest="daemon_args", action="append", default=[],
                   help="passed to the daemon (repeat for each word), e.g. --daemon-arg=--loader-nice --daemon-arg=0")
    p.add_argument("--no-control", dest="control", action="store_false",
                   help="skip the bursts to the instant-ack control receiver")
    p.add_argument("--child", nargs=5, metavar=("MODE", "PROTOCOL", "ENDPOINT", "SERVICE", "SPANS"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        mode, protocol, endpoint, service, spans = args.child
        child(mode, protocol, endpoint, service, int(spans))
        return 0
    span_bytes = queued_span_bytes(args.spans)
    common.say(args.json, f"a queued span of the burst costs {span_bytes:,.0f} bytes: a full queue of "
               f"{BATCH_SETTINGS.max_queue_size:,} holds {span_bytes * BATCH_SETTINGS.max_queue_size / 2**20:,.0f} MiB")
    bursts: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lousho-burst-") as tmp:
        daemon = start_daemon(Path(tmp) / "observe.duckdb", *args.daemon_args)
        control = Control() if args.control else None
        try:
            decoder = next((part.split("=", 1)[1] for line in daemon.output for part in line.split()
                            if part.startswith("decoder=")), "unknown")
            common.say(args.json, f"daemon up ({decoder} decoder); {args.spans:,} spans per burst; "
                       f"documented variables {BATCH_SETTINGS.environment()}")
            for repeat in range(args.repeats):
                for mode in args.modes:
                    for protocol in PROTOCOLS:
                        service = f"burst-{mode}-{protocol.split('/')[0]}-{repeat}"
                        for receiver in (daemon, control):
                            if receiver is None:
                                continue
                            b = one_burst(receiver, mode, protocol, service, args.spans)
                            bursts.append(b)
                            common.say(args.json, f"  {mode:12} {protocol:13} {b['receiver']:7} created "
                                       f"{b['created']:,} stored {b['stored']:,} lost {b['lost']:,} (queued at "
                                       f"the end {b['queued_at_end']:,}; {b['exports']} exports, "
                                       f"{b['export_ms_p50'] or 0:.1f} ms p50; created in {b['create_seconds']} s, "
                                       f"flushed at {b['flush_seconds']} s; load {b['load_1m_before']:.2f})")
        finally:
            daemon.stop()
            if control is not None:
                control.stop()

    summary = summarise(bursts, args.spans)
    doc = {"spans_per_burst": args.spans, "decoder": decoder, "bursts": bursts, "summary": summary,
           "documented_variables": BATCH_SETTINGS.environment(), "queued_span_bytes": round(span_bytes),
           "command": common.reproduce_command()}
    if args.json:
        common.emit_json(doc)
    else:
        verdicts = {True: "met", False: "MISSED", None: "not judged (no control)"}
        for row in summary:
            ceiling = (f"; the instant-ack control got {row['control_median']:,.0f} "
                       f"({row['control_range'][0]:,}-{row['control_range'][1]:,})" if row["control_median"] else "")
            share = (f", {row['share_of_control']:.1%} of the control" if row.get("share_of_control") else "")
            if row.get("share_interval_95"):
                low, high = row["share_interval_95"]
                share += f" (95% bootstrap interval {low:.1%}-{high:.1%} over {args.repeats} repeats)"
            exports = row["export_ms_p50"]
            if exports["daemon"] is not None and exports["control"] is not None:
                share += (f"; an export took {exports['daemon']:.1f} ms p50 against the control's "
                          f"{exports['control']:.1f}")
            print(f"{row['mode']:12} {row['protocol']:13} stored median {row['stored_median']:,.0f} of "
                  f"{args.spans:,} ({row['stored_range'][0]:,}-{row['stored_range'][1]:,}){ceiling}{share}. "
                  f"Goal: {row['goal']}: {verdicts[row['met']]}")
    return 1 if any(row["met"] is False for row in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
