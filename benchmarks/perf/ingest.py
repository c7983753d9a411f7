"""Sustained OTLP/HTTP ingest into ``lousho observe``, accepted and committed, against its limits.

Several exporter processes (``--clients``) post 512-span ExportTraceServiceRequest bodies over HTTP
keep-alive to a fresh daemon on a temp DuckDB file, each waiting for its 200 (the daemon answers once
the body is in its spool and ``fdatasync``-ed; its loader commits to DuckDB behind), for ``--seconds``,
as fast as the acks come or paced (``--rate``). Every body carries fresh ids, so no span is a
duplicate. Reported per repeat, medians quoted:

* accepted spans/s: the spans in 200 answers over the time to the last ack;
* committed spans/s: ``SELECT count(*) FROM spans``, polled after the last ack until it equals the
  spans acked, over the time from the start to that moment (the loader finishing included);
* the loader's lag: p50/p99 of ``lousho_load_lag_seconds`` (ack to load, per request), by bucket;
* p50/p99 ack latency per request, 503 answers, the daemon's peak RSS (VmHWM) and CPU use;
* the limit, measured in the same run on the same bodies and one core: protobuf parsing alone
  (``ExportTraceServiceRequest.ParseFromString``), the daemon's decoder (the native one when built) and
  the Python reference decoder (``otlp_decode.decode_protobuf``), and the daemon's rate as a ratio to each.

``--peer phoenix`` installs Arize Phoenix into its own venv under ``.lousho/bench/``, runs it on
loopback with its own SQLite file, sends it the same bodies with the same clients, waits for its
asynchronous inserter to stop adding rows (bounded), and reports the spans it actually stored per
second beside ours.

Not a timed test: a benchmark to run by hand (``make bench``). Everything it starts is stopped in
``finally``; all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import json
import multiprocessing as mp
import os
import pstats
import queue
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as common
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from lousho.observe.client.process import DaemonProcess, start_daemon
from lousho.observe.decode import otlp_native
from lousho.observe.decode.otlp_decode import decode_protobuf

GOAL_SPANS_PER_S = 150_000
PHOENIX_SPANS_PER_S_QUOTED = 100  # the figure; reference/observability-anchors.md has ~80
PHOENIX_VENV = common.BENCH_DIR / "phoenix-venv"
PHOENIX_PACKAGE = "arize-phoenix"
TEMPLATES_PER_CLIENT = 4
MAX_CONSECUTIVE_FAILURES = 20  # a client gives up after this many connection errors in a row


# --- one exporter process ---


@dataclass
class ClientResult:
    index: int
    ok: int = 0
    spans_ok: int = 0
    refused_503: int = 0
    other_status: dict[int, int] = field(default_factory=dict)
    connection_errors: int = 0
    rejected_spans: int = 0
    latencies_s: list[float] = field(default_factory=list)
    first_send: float = 0.0
    last_ack: float = 0.0
    prebuilt_bodies: int = 0
    stamped_late: int = 0
    cpu_s: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class ClientPlan:
    index: int
    url: str
    seed: int
    spans_per_body: int
    prebuilt_bodies: int
    seconds: float
    max_spans: int | None
    retry_wait_cap_s: float
    headers: dict[str, str]
    rate_spans_per_s: float | None = None  # this client's pace; None: as fast as the acks come
    roots_only: bool = False


def _client_main(plan: ClientPlan, ready: Any, go: Any, start: Any, results: Any) -> None:
    result = ClientResult(plan.index)
    try:
        _run_client(plan, ready, go, start, result)
    except Exception as e:  # deliberate: the parent must hear why a client stopped
        result.error = f"{type(e).__name__}: {e}"
        ready.set()
    results.put(result)


def _run_client(plan: ClientPlan, ready: Any, go: Any, start: Any, result: ClientResult) -> None:
    templates = common.templates(TEMPLATES_PER_CLIENT, plan.seed, plan.spans_per_body, plan.roots_only)
    # Payloads up front: every body is stamped with fresh ids before the clock starts.
    pool = [templates[i % len(templates)].stamp() for i in range(plan.prebuilt_bodies)]
    counts = [templates[i % len(templates)].span_count for i in range(plan.prebuilt_bodies)]
    result.prebuilt_bodies = len(pool)
    ready.set()
    if not go.wait(600):
        raise RuntimeError("never told to start")
    # The parent sets one start time for all: time.monotonic() is CLOCK_MONOTONIC, shared.
    start_at = start.value
    deadline = start_at + plan.seconds
    url = urllib.parse.urlsplit(plan.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    path = (url.path.rstrip("/") or "") + "/v1/traces"
    while time.monotonic() < start_at:
        time.sleep(0.0005)
    result.first_send = time.monotonic()
    cpu_before = os.times()
    conn = http.client.HTTPConnection(host, port, timeout=120)
    sent = 0
    failures = 0
    spans_sent = 0
    body: bytes | None = None
    spans = 0
    while time.monotonic() < deadline:
        if plan.max_spans is not None and spans_sent >= plan.max_spans:
            break
        if plan.rate_spans_per_s:  # paced: the next body leaves when the pace says it is due
            due = start_at + spans_sent / plan.rate_spans_per_s
            while (ahead := due - time.monotonic()) > 0:
                time.sleep(min(ahead, 0.05))
        if body is None:
            if sent < len(pool):
                body, spans = pool[sent], counts[sent]
                pool[sent] = b""  # release it once sent
            else:  # the pool is used up (the daemon beat the goal): stamp on the fly
                template = templates[sent % len(templates)]
                body, spans = template.stamp(), template.span_count
                result.stamped_late += 1
        started = time.perf_counter()
        try:
            conn.request("POST", path, body, plan.headers)
            response = conn.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            result.connection_errors += 1
            failures += 1
            conn.close()
            if failures >= MAX_CONSECUTIVE_FAILURES:
                raise RuntimeError(f"{failures} connection failures in a row to {plan.url}") from None
            time.sleep(0.05)
            conn = http.client.HTTPConnection(host, port, timeout=120)
            continue  # re-send the same body: ids are the same, so the daemon stores it once
        failures = 0
        elapsed = time.perf_counter() - started
        if response.status == 200:
            result.ok += 1
            result.spans_ok += spans
            result.latencies_s.append(elapsed)
            result.last_ack = time.monotonic()
            if payload:
                answer = ExportTraceServiceResponse()
                answer.ParseFromString(payload)
                result.rejected_spans += answer.partial_success.rejected_spans
            sent += 1
            spans_sent += spans
            body = None
        elif response.status in (429, 503):
            result.refused_503 += 1
            wait = _retry_after(response.getheader("retry-after"), plan.retry_wait_cap_s)
            time.sleep(max(0.0, min(wait, deadline - time.monotonic())))
        else:
            result.other_status[response.status] = result.other_status.get(response.status, 0) + 1
            sent += 1
            body = None
    conn.close()
    cpu_after = os.times()
    result.cpu_s = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)


def _retry_after(value: str | None, cap: float) -> float:
    """OTLP/HTTP: honour Retry-After; without one, the exporters' first backoff (1 s); capped."""
    try:
        wait = float(value) if value is not None else 1.0
    except ValueError:
        wait = 1.0
    return min(max(wait, 0.0), cap)


@dataclass
class LoadResult:
    clients: list[ClientResult]
    start_at: float
    elapsed_s: float
    spans_ok: int
    latencies_s: list[float]
    client_cpu_s: float
    # sample() at the start and at the deadline of the measured phase, when given
    window: tuple[dict[str, float], dict[str, float]] | None = None
    window_s: float = 0.0


def run_load(
    url: str, args: argparse.Namespace, seed: int, seconds: float, headers: dict[str, str],
    sample: Callable[[], dict[str, float]] | None = None,
) -> LoadResult:
    """Start ``--clients`` exporter processes, let them post for ``seconds``, gather their results."""
    ctx = mp.get_context("spawn")
    ready = [ctx.Event() for _ in range(args.clients)]
    go = ctx.Event()
    results = ctx.Queue()
    target_spans = args.spans if args.spans else int((args.rate or GOAL_SPANS_PER_S) * seconds * 1.1)
    per_client = -(-target_spans // args.clients)
    bodies = min(-(-per_client // args.spans_per_body), args.max_prebuilt_bodies)
    start = ctx.Value("d", 0.0)
    start_at = 0.0
    processes = []
    gathered: list[ClientResult] = []
    try:
        per_client_spans = -(-args.spans // args.clients) if args.spans else None
        for i in range(args.clients):
            plan = ClientPlan(
                index=i, url=url, seed=seed * 100 + i, spans_per_body=args.spans_per_body,
                prebuilt_bodies=bodies, seconds=seconds, max_spans=per_client_spans,
                retry_wait_cap_s=args.retry_wait_cap, headers=headers,
                rate_spans_per_s=args.rate / args.clients if args.rate else None, roots_only=args.roots_only,
            )
            proc = ctx.Process(target=_client_main, args=(plan, ready[i], go, start, results),
                               name=f"bench-client-{i}", daemon=True)
            proc.start()
            processes.append(proc)
        for i, event in enumerate(ready):  # each client builds its bodies before the clock starts
            if not event.wait(300):
                raise RuntimeError(f"client {i} did not build its bodies within 300 s")
        start_at = time.monotonic() + 0.2
        deadline = start_at + seconds
        start.value = start_at
        go.set()
        window = None
        if sample is not None:  # CPU counters over exactly [start, deadline]
            time.sleep(max(0.0, start_at - time.monotonic()))
            first = sample()
            time.sleep(max(0.0, deadline - time.monotonic()))
            window = (first, sample())
        wait_until = deadline + 180
        while len(gathered) < args.clients and time.monotonic() < wait_until:
            try:
                gathered.append(results.get(timeout=1.0))
            except queue.Empty:  # keep waiting, bounded by wait_until
                if not any(p.is_alive() for p in processes) and results.empty():
                    break
        if len(gathered) < args.clients:
            raise RuntimeError(f"only {len(gathered)} of {args.clients} clients reported back")
    finally:
        common.stop_senders(processes, go)
    common.raise_sender_errors(gathered, "client")
    last_ack = max((c.last_ack for c in gathered), default=start_at)
    return LoadResult(
        clients=sorted(gathered, key=lambda c: c.index),
        start_at=start_at,
        elapsed_s=max(last_ack - start_at, 1e-9),
        spans_ok=sum(c.spans_ok for c in gathered),
        latencies_s=[x for c in gathered for x in c.latencies_s],
        client_cpu_s=sum(c.cpu_s for c in gathered),
        window=window,
        window_s=seconds,
    )


# --- the limit: parsing alone, one core ---


def parse_limits(seed: int, spans_per_body: int, min_seconds: float) -> dict[str, float]:
    """Spans/s of ParseFromString alone, of the daemon's decoder and of the Python reference decoder, on bodies
    the clients also send."""
    templates = common.templates(TEMPLATES_PER_CLIENT, seed * 100, spans_per_body)
    bodies = [t.stamp() for t in templates for _ in range(8)]
    spans_per_pass = sum(t.span_count for t in templates) * 8

    def rate(fn: Any) -> float:
        fn(bodies[0])  # warm
        passes = 0
        started = time.process_time()
        while True:
            for body in bodies:
                fn(body)
            passes += 1
            spent = time.process_time() - started
            if spent >= min_seconds or passes >= 1000:
                return passes * spans_per_pass / spent

    def parse_only(body: bytes) -> None:
        ExportTraceServiceRequest().ParseFromString(body)

    return {
        "parse_only_spans_per_s": rate(parse_only),
        "decode_protobuf_spans_per_s": rate(decode_protobuf),
        "daemon_decoder_spans_per_s": rate(otlp_native.protobuf_decoder()),
        "body_bytes_per_span": sum(len(b) for b in bodies) / spans_per_pass,
    }


# --- where the daemon's time goes, in-process (--profile) ---


def _top_functions(profiler: cProfile.Profile, spans: int, top: int) -> list[dict[str, Any]]:
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(filename).name}:{line}" if line else filename
        rows.append({"function": f"{name} ({where})", "calls": calls, "own_us_per_span": own / spans * 1e6,
                     "cumulative_us_per_span": cumulative / spans * 1e6})
    rows.sort(key=lambda r: r["own_us_per_span"], reverse=True)
    return rows[:top]


def profile_inprocess(seed: int, spans_per_body: int, workdir: Path, top: int = 12) -> dict[str, Any]:
    """The daemon's two stages alone, on one thread: its decoder, and SpanStore.append (the
    writer's commit) at several group-commit sizes; plus cProfile's view of each (its overhead
    inflates Python-heavy rows, so read the shares, and the untraced rates for the totals)."""
    from lousho.observe.store.span_store import SpanStore

    decode = otlp_native.protobuf_decoder()
    templates = common.templates(TEMPLATES_PER_CLIENT, seed * 100, spans_per_body)
    bodies = [templates[i % len(templates)].stamp() for i in range(96)]
    spans = sum(templates[i % len(templates)].span_count for i in range(96))
    started = time.process_time()
    decoded = [decode(b) for b in bodies]
    decode_s = time.process_time() - started
    out: dict[str, Any] = {"spans": spans, "decode_us_per_span": decode_s / spans * 1e6}
    profiler = cProfile.Profile()
    profiler.enable()
    for body in bodies[:32]:
        decode(body)
    profiler.disable()
    out["decode_top"] = _top_functions(profiler, spans // 3, top)
    writer: dict[str, Any] = {}
    for group in (1, 4, 16):
        store = SpanStore(workdir / f"profile-{group}.duckdb")
        try:
            started = time.perf_counter()
            for i in range(0, len(decoded), group):
                store.append(decoded[i:i + group])
            wall = time.perf_counter() - started
        finally:
            store.close()
        writer[f"{group * spans_per_body}_spans_per_commit"] = {
            "us_per_span": wall / spans * 1e6, "spans_per_s": spans / wall,
            "ms_per_commit": wall / (len(decoded) / group) * 1e3,
        }
    out["append"] = writer
    store = SpanStore(workdir / "profile-cprofile.duckdb")
    try:
        profiler = cProfile.Profile()
        profiler.enable()
        for i in range(0, len(decoded), 4):
            store.append(decoded[i:i + 4])
        profiler.disable()
    finally:
        store.close()
    out["append_top"] = _top_functions(profiler, spans, 8)
    for path in workdir.glob("profile-*.duckdb*"):
        path.unlink()
    return out


def print_profile(prof: dict[str, Any]) -> None:
    print(f"  in-process, one thread, {prof['spans']:,} spans:")
    print(f"    decode ({otlp_native.NAME}) {prof['decode_us_per_span']:.1f} us/span; under cProfile, "
          "own time per span:")
    for r in prof["decode_top"]:
        print(f"      {r['own_us_per_span']:6.2f} us  {r['function']}")
    for size, r in prof["append"].items():
        print(f"    SpanStore.append at {size.replace('_', ' ')}: {r['us_per_span']:.1f} us/span "
              f"({r['spans_per_s']:,.0f} spans/s, {r['ms_per_commit']:.1f} ms/commit)")
    print("    SpanStore.append (2,048 spans/commit) under cProfile, own time per span:")
    for r in prof["append_top"]:
        print(f"      {r['own_us_per_span']:6.2f} us  {r['function']}")


# --- our daemon ---


def sql_scalar(url: str, query: str) -> Any:
    request = urllib.request.Request(
        f"{url}/v1/sql", data=json.dumps({"query": query}).encode(),
        headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        doc = json.loads(response.read())
    return doc["rows"][0][doc["columns"][0]]


def scrape_metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def run_lousho(args: argparse.Namespace, repeat: int, workdir: Path) -> dict[str, Any]:
    db = workdir / f"ingest-{repeat}.duckdb"
    extra: list[str] = []
    if args.queue_mib is not None:
        extra += ["--queue-mib", str(args.queue_mib)]
    if args.loader_nice is not None:
        extra += ["--loader-nice", str(args.loader_nice)]
    extra += args.daemon_args
    daemon: DaemonProcess | None = None
    try:
        daemon = start_daemon(db, *extra)
        pid = daemon.pid

        def sample() -> dict[str, float]:
            return {"daemon": common.proc_cpu_s(pid) or 0.0, **common.machine_cpu_s()}

        load = run_load(daemon.url, args, seed=args.seed + repeat, seconds=args.seconds,
                        headers={"content-type": "application/x-protobuf"}, sample=sample)
        load_1m = os.getloadavg()[0]  # the machine's load over the last minute, this run included
        acked_metrics = scrape_metrics(daemon.url)  # at the last ack: what the loader had done by then
        # Committed: every acked span is distinct (fresh ids), so the loader is done when count(*)
        # reaches the spans acked. Each query waits (up to 5 s) for the loader to pass the acks sent
        # before it; poll until the count is there, bounded.
        stored, caught_up = 0, None
        give_up = time.monotonic() + args.commit_wait_max
        while time.monotonic() < give_up:
            stored = int(sql_scalar(daemon.url, "SELECT count(*) FROM spans"))
            if stored >= load.spans_ok:
                caught_up = time.monotonic()
                break
            time.sleep(0.05)
        committed_s = (caught_up or time.monotonic()) - load.start_at
        # Folded: the kept runs (what ``lousho runs`` reads without recomputing) reach every committed span once
        # the fold's watermark reaches the last commit.
        folded_at = None
        while caught_up is not None and time.monotonic() < give_up:
            if sql_scalar(daemon.url, "SELECT (SELECT watermark FROM runs_fold) >= "
                                      "(SELECT max(commit_seq) FROM spans)"):
                folded_at = time.monotonic()
                break
            time.sleep(0.05)
        folded_s = (folded_at or time.monotonic()) - load.start_at
        scores = int(sql_scalar(daemon.url, "SELECT count(*) FROM scores"))
        metrics = scrape_metrics(daemon.url)
        rss = common.peak_rss_mib(daemon.pid)
        code = daemon.stop()
        daemon = None
    finally:
        if daemon is not None:
            daemon.kill()
    assert load.window is not None
    first, last = load.window
    cores = {k: (last[k] - first[k]) / load.window_s for k in first}
    clients_cores = load.client_cpu_s / load.elapsed_s
    # What else ran on the machine meanwhile (other sessions' tests, say): the figures are only as
    # good as this is small.
    other_cores = cores["busy"] - cores["daemon"] - clients_cores
    commits = metrics.get("lousho_commits_total", 0.0)
    lag = lag_quantiles(metrics)
    return {
        "repeat": repeat,
        "load_1m": load_1m,
        "elapsed_s": load.elapsed_s,
        "spans_stored": stored,
        "scores_stored": scores,
        "spans_acked": load.spans_ok,
        "loaded_at_last_ack": acked_metrics.get("lousho_load_spans_sum", 0.0),
        "caught_up": caught_up is not None,
        "committed_s": committed_s,
        "stored_spans_per_s": stored / committed_s,
        "folded_s": folded_s,
        "folded_spans_per_s": stored / folded_s,
        "folds": metrics.get("lousho_folds_total", 0.0),
        "acked_spans_per_s": load.spans_ok / load.elapsed_s,
        "load_lag_p50_s": lag[0.5],
        "load_lag_p99_s": lag[0.99],
        "load_lag_count": metrics.get('lousho_load_lag_seconds_count', 0.0),
        "loads_spans_max": metrics.get("lousho_load_spans_max", 0.0),
        "spool_syncs": metrics.get("lousho_spool_syncs_total", 0.0),
        "spool_sync_ms_mean": (metrics.get("lousho_spool_sync_seconds_sum", 0.0)
                               / max(metrics.get("lousho_spool_syncs_total", 0.0), 1.0) * 1e3),
        "requests_ok": sum(c.ok for c in load.clients),
        "ack_p50_ms": common.percentile(load.latencies_s, 50) * 1e3,
        "ack_p99_ms": common.percentile(load.latencies_s, 99) * 1e3,
        "ack_max_ms": max(load.latencies_s, default=float("nan")) * 1e3,
        "refused_503": sum(c.refused_503 for c in load.clients),
        "other_status": _merge_status(load.clients),
        "connection_errors": sum(c.connection_errors for c in load.clients),
        "rejected_spans": sum(c.rejected_spans for c in load.clients),
        "stamped_late": sum(c.stamped_late for c in load.clients),
        "daemon_peak_rss_mib": rss,
        "daemon_cpu_cores": cores["daemon"],
        "daemon_cpu_us_per_span": cores["daemon"] / max(load.spans_ok / load.elapsed_s, 1e-9) * 1e6,
        "clients_cpu_cores": clients_cores,
        "other_cpu_cores": max(other_cores, 0.0),
        "steal_cpu_cores": cores["steal"],
        "commits": commits,
        "spans_per_commit": stored / commits if commits else None,
        "commit_ms_mean": metrics.get("lousho_commit_seconds_sum", 0.0) / commits * 1e3 if commits else None,
        "commit_ms_max": metrics.get("lousho_commit_seconds_max", 0.0) * 1e3,
        "commit_busy_fraction": metrics.get("lousho_commit_seconds_sum", 0.0) / committed_s,
        "duplicates": metrics.get("lousho_spans_duplicate_total", 0.0),
        "daemon_exit_code": code,
    }


def lag_quantiles(metrics: dict[str, float], qs: tuple[float, ...] = (0.5, 0.99)) -> dict[float, float]:
    """Quantiles of ``lousho_load_lag_seconds`` by bucket: the upper bound of the bucket holding each one
    (inf when it falls in the +Inf bucket, nan with no observations)."""
    buckets = []
    for key, value in metrics.items():
        if key.startswith('lousho_load_lag_seconds_bucket{le="'):
            bound = key.split('"')[1]
            buckets.append((float("inf") if bound == "+Inf" else float(bound), value))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0
    out = {}
    for q in qs:
        found = (bound for bound, count in buckets if count >= q * total)
        out[q] = next(found, float("nan")) if total else float("nan")
    return out


def _merge_status(clients: list[ClientResult]) -> dict[int, int]:
    merged: dict[int, int] = {}
    for c in clients:
        for status, n in c.other_status.items():
            merged[status] = merged.get(status, 0) + n
    return merged


# --- the peer: Arize Phoenix ---


class PeerUnavailable(Exception):
    """Phoenix could not be installed or started here; the message says why."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_phoenix(quiet: bool) -> Path:
    """Phoenix's own venv (created once, reused); returns its python."""
    python = PHOENIX_VENV / "bin" / "python"
    marker = PHOENIX_VENV / ".installed"
    if marker.exists() and python.exists():
        return python
    common.say(quiet, f"installing {PHOENIX_PACKAGE} into {PHOENIX_VENV} (once) ...")
    base = getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable
    steps = [
        [base, "-m", "venv", str(PHOENIX_VENV)],
        [str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
        [str(python), "-m", "pip", "install", "-q", PHOENIX_PACKAGE],
    ]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PeerUnavailable(f"`{' '.join(step)}` failed: {e}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise PeerUnavailable(f"`{' '.join(step)}` exited {done.returncode}: " + " | ".join(tail))
    marker.write_text(PHOENIX_PACKAGE + "\n")
    return python


def phoenix_version(python: Path) -> str:
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('arize-phoenix'))"],
        capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or "?"


@dataclass
class PhoenixProcess:
    process: subprocess.Popen[bytes]
    url: str
    db: Path
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            # Its own process group: uvicorn workers and helpers go with it.
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def start_phoenix(python: Path, workdir: Path, timeout: float = 180.0) -> PhoenixProcess:
    port, grpc_port = free_port(), free_port()
    phoenix_dir = workdir / "phoenix"
    phoenix_dir.mkdir(parents=True, exist_ok=True)
    # Only our settings: no inherited PHOENIX_* or OTEL_* (a database URL, a collector endpoint).
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))},
        "PHOENIX_WORKING_DIR": str(phoenix_dir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        # Loopback only: no telemetry, no fetches of its own (fonts, WASM, the docs MCP server its
        # assistant connects to at start), no assistant.
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
        "PHOENIX_ENABLE_AUTH": "false",
        "DO_NOT_TRACK": "1",
    }
    log = workdir / "phoenix.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(python), "-m", "phoenix.server.main", "serve"],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(phoenix_dir),
            start_new_session=True,
        )
    phoenix = PhoenixProcess(process, f"http://127.0.0.1:{port}", phoenix_dir / "phoenix.db", log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PeerUnavailable(f"phoenix exited {process.returncode} at start: {_tail(log)}")
        try:
            with urllib.request.urlopen(f"{phoenix.url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return phoenix
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    phoenix.stop()
    raise PeerUnavailable(f"phoenix did not answer /healthz within {timeout:.0f} s: {_tail(log)}")


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def phoenix_span_count(db: Path) -> int:
    """Spans in Phoenix's SQLite file, read-only, as stored (its own table ``spans``)."""
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(con.execute("SELECT count(*) FROM spans").fetchone()[0])
    except sqlite3.OperationalError:  # tables not created yet, or busy past the timeout
        return 0
    finally:
        con.close()


def run_phoenix(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    python = ensure_phoenix(args.json)
    version = phoenix_version(python)
    phoenix: PhoenixProcess | None = None
    try:
        phoenix = start_phoenix(python, workdir)
        common.say(args.json, f"phoenix {version} up at {phoenix.url}; sending for {args.peer_seconds:g} s")
        load = run_load(phoenix.url, args, seed=args.seed + 999, seconds=args.peer_seconds,
                        headers={"content-type": "application/x-protobuf"})
        at_deadline = phoenix_span_count(phoenix.db)
        common.say(args.json, f"phoenix acked {load.spans_ok:,} spans, stored {at_deadline:,} so far; "
                   f"waiting up to {args.peer_settle_max:g} s for its inserter")
        # Phoenix acks before storing, and decodes its backlog on the same event loop as its
        # inserter, so the count can stand still for a while with work pending. Settled: everything
        # acked is stored, or the count stood still for --peer-settle-quiet seconds while the
        # server's CPU was idle too. Bounded by --peer-settle-max.
        settle_deadline = time.monotonic() + args.peer_settle_max
        last, last_change = at_deadline, time.monotonic()
        cpu_mark, cpu_mark_at = common.proc_cpu_s(phoenix.process.pid) or 0.0, time.monotonic()
        while time.monotonic() < settle_deadline and phoenix.process.poll() is None:
            time.sleep(2.0)
            count = phoenix_span_count(phoenix.db)
            now = time.monotonic()
            if count != last:
                last, last_change = count, now
                cpu_mark, cpu_mark_at = common.proc_cpu_s(phoenix.process.pid) or 0.0, now
            if last >= load.spans_ok:
                break
            if now - last_change >= args.peer_settle_quiet:
                spent = (common.proc_cpu_s(phoenix.process.pid) or 0.0) - cpu_mark
                busy = spent / max(now - cpu_mark_at, 1e-9)
                if busy < 0.05:
                    break
                cpu_mark, cpu_mark_at = common.proc_cpu_s(phoenix.process.pid) or 0.0, now
        still_growing = last < load.spans_ok and time.monotonic() >= settle_deadline
        stored = last
        store_elapsed = max(last_change - load.start_at, load.elapsed_s)
        rss = common.peak_rss_mib(phoenix.process.pid)
        exited = phoenix.process.poll()
    finally:
        if phoenix is not None:
            phoenix.stop()
    return {
        "version": version,
        "send_seconds": load.elapsed_s,
        "spans_acked": load.spans_ok,
        "acked_spans_per_s": load.spans_ok / load.elapsed_s,
        "ack_p50_ms": common.percentile(load.latencies_s, 50) * 1e3,
        "ack_p99_ms": common.percentile(load.latencies_s, 99) * 1e3,
        "refused_503": sum(c.refused_503 for c in load.clients),
        "spans_stored_at_send_end": at_deadline,
        "spans_stored": stored,
        "stored_spans_per_s": stored / store_elapsed,
        "store_elapsed_s": store_elapsed,
        "still_growing_at_wait_limit": still_growing,
        "exited_early": exited,
        "lost_or_pending_after_ack": load.spans_ok - stored,
        "server_peak_rss_mib": rss,
    }


# --- main ---


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--clients", type=int, default=4, help="exporter processes")
    p.add_argument("--seconds", type=float, default=20.0, help="measured phase per repeat")
    p.add_argument("--spans", type=int, default=None,
                   help="stop after this many spans in all (the time limit still applies)")
    p.add_argument("--repeats", type=int, default=3, help="measured phases; medians are quoted")
    p.add_argument("--spans-per-body", type=int, default=512)
    p.add_argument("--max-prebuilt-bodies", type=int, default=2000,
                   help="per client; past it, bodies are stamped with new ids while sending")
    p.add_argument("--queue-mib", type=int, default=None, help="passed to the daemon")
    p.add_argument("--loader-nice", type=int, default=None,
                   help="passed to the daemon (0: the loader's threads level with the request path)")
    p.add_argument("--rate", type=float, default=None,
                   help="pace the clients to this many spans/s in all (default: as fast as the acks come)")
    p.add_argument("--roots-only", action="store_true",
                   help="every span an invoke_agent root with a run id and a score (1 score row per span)")
    p.add_argument("--commit-wait-max", type=float, default=300.0,
                   help="longest wait after the last ack for count(*) to reach the spans acked")

    p.add_argument("--retry-wait-cap", type=float, default=1.0,
                   help="longest pause after a 503, whatever Retry-After says")
    p.add_argument("--parse-seconds", type=float, default=1.5,
                   help="CPU seconds per parse-only measurement")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--daemon-arg", dest="daemon_args", action="append", default=[],
                   help="passed to the daemon, one word each: --daemon-arg=--load-interval --daemon-arg=0.06")
    p.add_argument("--peer", choices=["phoenix"], default=None)
    p.add_argument("--peer-seconds", type=float, default=20.0)
    p.add_argument("--peer-settle-max", type=float, default=300.0,
                   help="longest wait for the peer's stored count to stop growing")
    p.add_argument("--peer-settle-quiet", type=float, default=20.0,
                   help="seconds without growth (and with an idle server) that count as settled")
    p.add_argument("--profile", action="store_true",
                   help="also time decode and the writer's commit alone, in-process, with cProfile")
    p.add_argument("--keep", action="store_true", help="keep the temp directory (DuckDB files)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = p.parse_args(argv)
    if args.clients < 1 or args.repeats < 1 or args.seconds <= 0 or args.spans_per_body < 2:
        p.error("--clients, --repeats, --seconds must be positive and --spans-per-body at least 2")
    return args


def summarise(repeats: list[dict[str, Any]], limits: list[dict[str, float]]) -> dict[str, Any]:
    keys = [k for k, v in repeats[0].items() if isinstance(v, int | float) and k != "repeat"]
    med: dict[str, Any] = {}
    for k in keys:
        values = [r[k] for r in repeats if r.get(k) is not None]
        med[k] = common.median(values) if values else None
    for k in limits[0]:
        med[k] = common.median([x[k] for x in limits])
    med["ratio_to_parse_only"] = med["stored_spans_per_s"] / med["parse_only_spans_per_s"]
    med["ratio_to_decode_protobuf"] = med["stored_spans_per_s"] / med["decode_protobuf_spans_per_s"]
    med["ratio_to_daemon_decoder"] = med["stored_spans_per_s"] / med["daemon_decoder_spans_per_s"]
    med["ratio_to_goal"] = med["stored_spans_per_s"] / GOAL_SPANS_PER_S
    return med


def print_report(doc: dict[str, Any]) -> None:
    med = doc["median"]
    n = len(doc["repeats"])
    print()
    pace = f", paced at {doc['rate']:,.0f} spans/s" if doc.get("rate") else ""
    shape = "roots only (a run and a score on every span)" if doc.get("roots_only") else "the workload's runs"
    print(f"lousho observe ingest, ack after the spool's fdatasync: {doc['clients']} clients x "
          f"{doc['spans_per_body']}-span protobuf bodies, {shape}{pace}, {doc['seconds']:g} s, median of {n}")
    for r in doc["repeats"]:
        print(f"  repeat {r['repeat']}: acked {r['acked_spans_per_s']:>9,.0f} spans/s "
              f"({r['spans_acked']:,} in {r['elapsed_s']:.1f} s), committed {r['stored_spans_per_s']:>9,.0f} spans/s "
              f"({r['spans_stored']:,} queryable {r['committed_s']:.1f} s after the start"
              f"{'' if r['caught_up'] else ', NOT caught up'}; {r['loaded_at_last_ack']:,.0f} loaded at the last ack), "
              f"folded {r['folded_spans_per_s']:,.0f} spans/s ({r['folded_s']:.1f} s, {r['folds']:.0f} folds)"
              f"  ack p50 {r['ack_p50_ms']:.1f} ms p99 {r['ack_p99_ms']:.1f} ms  load lag p99 <= "
              f"{r['load_lag_p99_s']:g} s  503s {r['refused_503']}  "
              f"RSS {r['daemon_peak_rss_mib']:.0f} MiB  load {r['load_1m']:.2f}")
    rows = [
        ("accepted (spans in 200s / elapsed)", f"{med['acked_spans_per_s']:,.0f} spans/s"),
        ("committed (count(*) / time to it)", f"{med['stored_spans_per_s']:,.0f} spans/s"),
        ("folded into the kept runs (time to it)", f"{med['folded_spans_per_s']:,.0f} spans/s, "
                                                   f"{med['folded_s'] - med['committed_s']:.1f} s after committed"),
        ("load lag p50 / p99 (by bucket)", f"<= {med['load_lag_p50_s']:g} / <= {med['load_lag_p99_s']:g} s"),
        ("spool", f"{med['spool_syncs']:,.0f} fdatasyncs, {med['spool_sync_ms_mean']:.1f} ms mean"),
        ("ack latency p50 / p99", f"{med['ack_p50_ms']:.1f} / {med['ack_p99_ms']:.1f} ms"),
        ("503 answers", f"{med['refused_503']:.0f}"),
        ("daemon peak RSS (VmHWM)", f"{med['daemon_peak_rss_mib']:.0f} MiB"),
        ("daemon CPU", f"{med['daemon_cpu_cores']:.2f} cores, {med['daemon_cpu_us_per_span']:.1f} us/span"),
        ("clients CPU", f"{med['clients_cpu_cores']:.2f} cores"),
        ("the rest of the machine meanwhile", f"{med['other_cpu_cores']:.2f} cores busy, "
                                              f"{med['steal_cpu_cores']:.2f} stolen by the hypervisor"),
        ("loader commits", f"{med['spans_per_commit']:,.0f} spans/commit (max {med['loads_spans_max']:,.0f}), "
                           f"{med['commit_ms_mean']:.1f} ms mean, busy {med['commit_busy_fraction']:.0%}"),
        ("limit: ParseFromString, 1 core", f"{med['parse_only_spans_per_s']:,.0f} spans/s"),
        (f"limit: {doc['decoder']} decoder, 1 core", f"{med['daemon_decoder_spans_per_s']:,.0f} spans/s"),
        ("limit: Python decode_protobuf, 1 core", f"{med['decode_protobuf_spans_per_s']:,.0f} spans/s"),
        ("daemon / parse-only", f"{med['ratio_to_parse_only']:.3f}"),
        (f"daemon / {doc['decoder']} decoder", f"{med['ratio_to_daemon_decoder']:.3f}"),
        ("daemon / Python decode_protobuf", f"{med['ratio_to_decode_protobuf']:.3f}"),
        (f"daemon / goal ({GOAL_SPANS_PER_S:,} spans/s)", f"{med['ratio_to_goal']:.3f}"),
        ("body size", f"{med['body_bytes_per_span']:.0f} bytes/span"),
    ]
    for label, value in rows:
        print(f"  {label:<36} {value}")
    if "profile" in doc:
        print_profile(doc["profile"])
    peer = doc.get("phoenix")
    if peer is not None:
        if "error" in peer:
            print(f"  phoenix: not measured: {peer['error']}")
        else:
            theirs = peer["stored_spans_per_s"]
            ratio = med["stored_spans_per_s"] / theirs if theirs else None
            print(f"  phoenix {peer['version']}: {peer['stored_spans_per_s']:,.0f} spans/s stored "
                  f"({peer['spans_stored']:,} of {peer['spans_acked']:,} acked, over "
                  f"{peer['store_elapsed_s']:.0f} s); acked {peer['acked_spans_per_s']:,.0f} spans/s, "
                  f"503s {peer['refused_503']}, RSS {peer['server_peak_rss_mib'] or 0:.0f} MiB")
            if peer["still_growing_at_wait_limit"]:
                print(f"    still storing when the wait ended (last growth {peer['store_elapsed_s']:.0f} s "
                      f"after the start): {peer['lost_or_pending_after_ack']:,} acked spans not stored yet")
            if ratio:
                print(f"  lousho / phoenix (stored spans/s)    {ratio:,.0f}x")
    print(f"reproduce: {doc['command']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="lousho-ingest-"))
    doc: dict[str, Any] = {
        "benchmark": "ingest", "command": common.reproduce_command(), "clients": args.clients,
        "seconds": args.seconds, "spans_per_body": args.spans_per_body, "goal_spans_per_s": GOAL_SPANS_PER_S,
        "rate": args.rate, "roots_only": args.roots_only,
        "cpus": os.cpu_count(), "python": sys.version.split()[0], "decoder": otlp_native.NAME,
    }
    repeats: list[dict[str, Any]] = []
    limits: list[dict[str, float]] = []
    try:
        for repeat in range(args.repeats):
            limits.append(parse_limits(args.seed + repeat, args.spans_per_body, args.parse_seconds))
            common.say(args.json, f"repeat {repeat + 1}/{args.repeats}: parse-only "
                       f"{limits[-1]['parse_only_spans_per_s']:,.0f} spans/s, {otlp_native.NAME} decoder "
                       f"{limits[-1]['daemon_decoder_spans_per_s']:,.0f} spans/s, Python decode_protobuf "
                       f"{limits[-1]['decode_protobuf_spans_per_s']:,.0f} spans/s; load "
                       f"{os.getloadavg()[0]:.2f}; daemon ...")
            result = run_lousho(args, repeat, workdir)
            repeats.append(result)
            common.say(args.json, f"  {result['stored_spans_per_s']:,.0f} spans/s committed; load "
                       f"{os.getloadavg()[0]:.2f}")
            if not args.keep:
                for path in workdir.glob(f"ingest-{repeat}.duckdb*"):  # the file, its WAL, its spool
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        doc["repeats"] = repeats
        doc["limits"] = limits
        doc["median"] = summarise(repeats, limits)
        if args.profile:
            common.say(args.json, "profiling decode and commit in-process ...")
            doc["profile"] = profile_inprocess(args.seed, args.spans_per_body, workdir)
        if args.peer == "phoenix":
            try:
                doc["phoenix"] = run_phoenix(args, workdir)
            except PeerUnavailable as e:
                doc["phoenix"] = {"error": str(e)}
            except Exception as e:  # deliberate: the peer failing must not hide our figures
                doc["phoenix"] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        if args.keep:
            common.say(args.json, f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        common.emit_json(doc)
    else:
        print_report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
