"""Shared pieces of the perf benchmarks: OTLP payloads, timing helpers, process facts, output.

Payloads mirror ``lousho.observe.client.workload``: an ``invoke_agent`` root per run carrying the run
attributes and a pass/fail ``gen_ai.evaluation.result`` event, ``chat`` spans with token usage and
``execute_tool`` spans. Bodies are built once as protobuf templates; each send stamps fresh random
trace and span ids (and the run ids derived from them) into a copy, so no span is ever a duplicate
and the per-request cost on the client is a few microseconds of byte copying.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import shlex
import statistics
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / ".lousho" / "bench"

AGENTS = ("coder", "triage", "reviewer", "planner")
REVISIONS = ("rev-a1", "rev-b2", "rev-c3")
TOOLS = ("read_file", "run_tests", "edit_file", "search")
BASE_NS = 1_780_000_000_000_000_000
_RUN_PREFIX = "run-"
_RUN_HEX = 16  # run ids are "run-" + the first 8 bytes of the trace id, in hex

# Protobuf wire tags of the id fields of opentelemetry.proto.trace.v1.Span.
_TRACE_TAG = b"\x0a\x10"  # field 1, length-delimited, 16 bytes
_SPAN_TAG = b"\x12\x08"  # field 2, 8 bytes
_PARENT_TAG = b"\x22\x08"  # field 4, 8 bytes
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    if isinstance(value, tuple):
        out = KeyValue(key=key)
        out.value.array_value.values.extend(AnyValue(string_value=v) for v in value)
        return out
    return KeyValue(key=key, value=AnyValue(string_value=value))


@dataclass
class _Run:
    trace_id: bytes
    root_id: bytes
    spans: list[Span]


def _run_spans(rng: random.Random, index: int, start_ns: int, seed: int, roots_only: bool = False) -> _Run:
    """One run as workload.py emits it: children first (the SDK exports in end order), then root.
    ``roots_only``: the root alone, never errored, so every span is a run with a score."""
    trace_id = rng.randbytes(16)
    root_id = rng.randbytes(8)
    agent = AGENTS[index % len(AGENTS)]
    revision = REVISIONS[rng.randrange(len(REVISIONS))]
    case = f"case-{rng.randrange(20):03d}"
    errored = rng.random() < 0.05 and not roots_only
    failed = not errored and rng.random() < 0.2
    spans: list[Span] = []
    t = start_ns + 1_000_000
    for step in range(0 if roots_only else rng.randint(1, 4)):
        chat_ns = rng.randint(200_000_000, 3_000_000_000)
        chat = Span(
            trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=root_id,
            name="chat gpt-test", kind=Span.SPAN_KIND_CLIENT,
            start_time_unix_nano=t, end_time_unix_nano=t + chat_ns,
        )
        chat.attributes.extend([
            kv("gen_ai.operation.name", "chat"),
            kv("gen_ai.provider.name", "openai"),
            kv("gen_ai.request.model", "gpt-test"),
            kv("gen_ai.response.model", "gpt-test-2026"),
            kv("gen_ai.usage.input_tokens", rng.randint(200, 2000)),
            kv("gen_ai.usage.output_tokens", rng.randint(20, 400)),
            kv("gen_ai.response.finish_reasons", ("tool_calls",)),
        ])
        t += chat_ns + 100_000
        tool = TOOLS[(index + step) % len(TOOLS)]
        tool_ns = rng.randint(1_000_000, 500_000_000)
        call = Span(
            trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=root_id,
            name=f"execute_tool {tool}", kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=t, end_time_unix_nano=t + tool_ns,
        )
        call.attributes.extend([
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", tool),
            kv("gen_ai.tool.call.id", f"call-{seed}-{index}-{step}"),
        ])
        t += tool_ns + 100_000
        spans += [chat, call]
    root = Span(
        trace_id=trace_id, span_id=root_id, name=f"invoke_agent {agent}",
        kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=start_ns, end_time_unix_nano=t + 1_000_000,
    )
    run_id = _RUN_PREFIX + "0" * _RUN_HEX  # stamped from the trace id at send time
    root.attributes.extend([
        kv("gen_ai.operation.name", "invoke_agent"),
        kv("gen_ai.agent.name", agent),
        kv("gen_ai.provider.name", "openai"),
        kv("gen_ai.conversation.id", f"conv-{seed}-{index // 3}"),
        kv("lousho.run.id", run_id),
        kv("lousho.run.kind", "send"),
        kv("lousho.harness.revision", revision),
        kv("lousho.case.id", case),
        kv("gen_ai.input.messages", f'[{{"role":"user","content":"fix {case}"}}]'),
    ])
    if errored:
        root.attributes.append(kv("error.type", "timeout"))
        root.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message="model call timed out"))
    else:
        root.attributes.append(
            kv("gen_ai.output.messages", f'[{{"role":"assistant","content":"done {case}"}}]'))
        event = root.events.add(name="gen_ai.evaluation.result", time_unix_nano=t)
        event.attributes.extend([kv("gen_ai.evaluation.name", "tests")])
        if failed:
            event.attributes.extend([
                kv("gen_ai.evaluation.score.value", 0.0),
                kv("gen_ai.evaluation.score.label", "fail"),
                kv("gen_ai.evaluation.explanation", "hidden test failed"),
                kv("lousho.check.failed", "test_rounding"),
            ])
        else:
            event.attributes.extend([
                kv("gen_ai.evaluation.score.value", 1.0),
                kv("gen_ai.evaluation.score.label", "pass"),
            ])
    spans.append(root)
    return _Run(trace_id, root_id, spans)


class Template:
    """A serialized ExportTraceServiceRequest and where its ids sit, for stamping fresh ids."""

    def __init__(self, seed: int, spans_per_body: int = 512, service: str = "bench-agent",
                 roots_only: bool = False) -> None:
        rng = random.Random(seed)
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.extend([
            kv("service.name", service),
            kv("telemetry.sdk.language", "python"),
            kv("telemetry.sdk.name", "opentelemetry"),
            kv("telemetry.sdk.version", "1.39.0"),
        ])
        ss = rs.scope_spans.add()
        ss.scope.name = "lousho.workload"
        runs: list[_Run] = []
        count = 0
        index = 0
        start = BASE_NS + rng.randrange(10**15)
        while count < spans_per_body:
            run = _run_spans(rng, index, start, seed, roots_only)
            room = spans_per_body - count
            if len(run.spans) > room:  # the body is full: keep the root and as many children as fit
                run.spans = run.spans[: room - 1] + run.spans[-1:]
            runs.append(run)
            ss.spans.extend(run.spans)
            count += len(run.spans)
            index += 1
            start += rng.randint(1_000_000, 50_000_000)
        self.spans = count
        self.roots = len(runs)
        self.body = request.SerializeToString()
        self.trace_count = len(runs)
        self.span_count = count
        # Every occurrence of every id, mapped to the index of the id it holds.
        trace_index = {r.trace_id: i for i, r in enumerate(runs)}
        span_ids = [s.span_id for r in runs for s in r.spans]
        span_index = {sid: i for i, sid in enumerate(span_ids)}
        self._trace_pos, self._trace_of = _occurrences(self.body, _TRACE_TAG, trace_index)
        span_pos, span_of = _occurrences(self.body, _SPAN_TAG, span_index)
        parent_pos, parent_of = _occurrences(self.body, _PARENT_TAG, span_index)
        self._span_pos = np.concatenate([span_pos, parent_pos])
        self._span_of = np.concatenate([span_of, parent_of])
        assert len(self._trace_pos) == count and len(span_pos) == count
        run_marker = (_RUN_PREFIX + "0" * _RUN_HEX).encode()
        run_pos = _find_all(self.body, run_marker)
        assert len(run_pos) == len(runs), (len(run_pos), len(runs))
        # Roots are the last span of each run, so run i's run id is the i-th marker in body order.
        self._run_pos = np.array(run_pos, dtype=np.int64) + len(_RUN_PREFIX)
        self._template = np.frombuffer(self.body, dtype=np.uint8)
        self._ar16 = np.arange(16)
        self._ar8 = np.arange(8)

    def stamp(self, random_bytes: Callable[[int], bytes] = os.urandom) -> bytes:
        """A copy of the body with new random trace and span ids; run ids follow the trace ids."""
        buf = self._template.copy()
        fresh = np.frombuffer(random_bytes(16 * self.trace_count + 8 * self.span_count), np.uint8)
        traces = fresh[: 16 * self.trace_count].reshape(self.trace_count, 16)
        spans = fresh[16 * self.trace_count:].reshape(self.span_count, 8)
        buf[self._trace_pos[:, None] + self._ar16] = traces[self._trace_of]
        buf[self._span_pos[:, None] + self._ar8] = spans[self._span_of]
        head = traces[:, :8]
        hexed = np.empty((self.trace_count, 16), np.uint8)
        hexed[:, 0::2] = _HEX[head >> 4]
        hexed[:, 1::2] = _HEX[head & 15]
        buf[self._run_pos[:, None] + self._ar16] = hexed
        return buf.tobytes()


def _find_all(body: bytes, needle: bytes) -> list[int]:
    found = []
    at = body.find(needle)
    while at >= 0:
        found.append(at)
        at = body.find(needle, at + 1)
    return found


def _occurrences(body: bytes, tag: bytes, ids: dict[bytes, int]) -> tuple[np.ndarray, np.ndarray]:
    """Offsets of the id bytes after ``tag`` for every id in ``ids`` (random ids never collide)."""
    positions: list[int] = []
    which: list[int] = []
    for ident, index in ids.items():
        for at in _find_all(body, tag + ident):
            positions.append(at + len(tag))
            which.append(index)
    order = np.argsort(positions)
    return np.array(positions, np.int64)[order], np.array(which, np.int64)[order]


def templates(count: int, seed: int, spans_per_body: int = 512, roots_only: bool = False) -> list[Template]:
    return [Template(seed * 1000 + i, spans_per_body, roots_only=roots_only) for i in range(count)]


# --- timing and reporting ---


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM (peak resident set) of a live process, in MiB; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (all its threads)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def machine_cpu_s() -> dict[str, float]:
    """CPU seconds since boot, all cores (/proc/stat): busy in this machine, and stolen by the
    hypervisor (a VM's neighbours: time this machine wanted a CPU and did not get one)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    ticks += [0] * (8 - len(ticks))
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    hz = os.sysconf("SC_CLK_TCK")
    return {"busy": (user + nice + system + irq + softirq) / hz, "steal": steal / hz}


def stop_senders(processes: Sequence[Any], go: Any) -> None:
    """Release any sender still waiting for the start, then join each (terminated after 10 s)."""
    go.set()
    for proc in processes:
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)


def raise_sender_errors(reports: Sequence[Any], what: str) -> None:
    """A sender's error (its report's ``error``) fails the measurement: a figure without it would be wrong."""
    errors = [r.error for r in reports if r.error]
    if errors:
        raise RuntimeError(f"{what} failed: " + "; ".join(errors))


def daemon_metrics(url: str) -> str:
    """The text of a daemon's ``/metrics``."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def metric_value(text: str, name: str) -> float:
    """One unlabelled sample of ``/metrics`` text (0 when absent)."""
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def reproduce_command() -> str:
    exe = os.path.relpath(sys.executable, REPO) if sys.executable.startswith(str(REPO)) else sys.executable
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO)
    return shlex.join([exe, script, *sys.argv[1:]])


def emit_json(doc: dict[str, Any]) -> None:
    print(json.dumps(doc, sort_keys=True, indent=2, default=str))


def say(quiet: bool, *parts: Any) -> None:
    """Progress for a person; silent under --json so stdout stays one JSON document."""
    if not quiet:
        print(*parts, flush=True)
    else:
        print(*parts, file=sys.stderr, flush=True)


def now() -> float:
    return time.perf_counter()
