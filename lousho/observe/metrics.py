"""The daemon's counters, rendered as Prometheus text for ``GET /metrics``."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lousho.observe import memory_cap
from lousho.observe.errors import StoreCorrupt, StoreDiskFull

# Bounds of the load-lag histogram, seconds.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Metrics:
    """Monotonic counters and gauges, updated from the event loop, gRPC threads and the writer."""

    spans_accepted: int = 0
    spans_rejected: int = 0
    spans_duplicate: int = 0
    spans_pruned: int = 0
    values_nulled: int = 0
    requests_refused_full: int = 0
    requests_bad: int = 0
    commits: int = 0
    commit_seconds_sum: float = 0.0
    commit_seconds_max: float = 0.0
    checkpoints: int = 0
    checkpoint_seconds_sum: float = 0.0
    # Completed looks of the regression trigger at a registered agent: a test that expects no cycle
    # waits for looks made after its runs were stored, rather than for a time that proves nothing.
    trigger_polls: int = 0
    # Each registered agent's detector on its live revision: agent -> (revision, statistic, threshold or None
    # while its reference is incomplete, reference runs so far, reference runs needed).
    trigger_detectors: dict[str, tuple[str, float, float | None, int, int]] = field(default_factory=dict)
    queue_bytes: int = 0
    queue_capacity_bytes: int = 0
    # The spool (store/spool.py): bytes on disk (loaded or not, until a checkpoint lets them go) and its bound.
    spool_bytes: int = 0
    spool_capacity_bytes: int = 0
    spool_syncs: int = 0
    spool_sync_seconds_sum: float = 0.0
    spool_records: int = 0
    # Records accepted before a stop and loaded after the next start; records kept on disk only (memory
    # was spent) and read back; records that could not be loaded (skipped, logged); damaged segments.
    spool_replayed: int = 0
    spool_spilled: int = 0
    spool_unloadable: int = 0
    spool_damaged_segments: int = 0
    # The loader: spans per load, and seconds from each request's ack to its load (a histogram).
    load_spans_sum: int = 0
    load_spans_max: int = 0
    load_lag_counts: list[int] = field(default_factory=lambda: [0] * (len(LAG_BUCKETS) + 1))
    load_lag_sum: float = 0.0
    # The loader's lag now (seconds since the oldest record not loaded was acked), set by the daemon's reader.
    lag_now: Callable[[], float] | None = field(default=None, repr=False)
    spool_bytes_now: Callable[[], int] | None = field(default=None, repr=False)
    # The kept runs' fold (runs/runs_fold.FoldStats), read from the store.
    fold_now: Callable[[], Any] | None = field(default=None, repr=False)
    # Set once the store is found damaged: /healthz answers 503 with it from then on.
    store_damage: StoreCorrupt | None = None
    # Set while the store's disk is full (retryable: exports get 503, /healthz says why); cleared when room returns.
    store_disk_full: StoreDiskFull | None = None
    store_disk_full_events: int = 0
    # Set if the loader's thread ever ends before a close (what ended it): nothing more is loaded until a
    # restart (the spool keeps every acked request); /healthz answers 503 with it.
    loader_stopped: str | None = None
    # notAfter of the TLS certificate (seconds since the epoch), None without TLS: /metrics shows the days left.
    tls_not_after: float | None = None
    # The lake shipper's state (lake/lake_shipper.ShipperState: position, commits, rows, last error); None: no lake.
    lake_state: Any = field(default=None, repr=False)
    requests_refused_disk_full: int = 0
    # Requests refused because an allocation met the process's memory cap (memory_cap.py) as they were taken.
    requests_refused_memory: int = 0
    # Which OTLP/protobuf decoder runs: "native" (the C module) or "python" (it was not built).
    decoder: str = "python"
    # And for OTLP/JSON: "native" (the transcoder into the native decoder) or "python".
    json_decoder: str = "python"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def mark_store_damaged(self, error: StoreCorrupt) -> None:
        with self._lock:
            if self.store_damage is None:
                self.store_damage = error

    def set_disk_full(self, error: StoreDiskFull | None) -> bool:
        """Record whether the disk is full now; returns whether that changed."""
        with self._lock:
            changed = (self.store_disk_full is None) != (error is None)
            if error is not None and self.store_disk_full is None:
                self.store_disk_full_events += 1
            self.store_disk_full = error
            return changed

    def set_detector(self, agent: str, revision: str, statistic: float, threshold: float | None,
                     reference_runs: int, reference_needed: int) -> None:
        with self._lock:
            self.trigger_detectors[agent] = (revision, statistic, threshold, reference_runs, reference_needed)

    def observe_load(self, lags: list[float], spans: int) -> None:
        """One load: the spans it appended, and each of its requests' lag from ack to load."""
        with self._lock:
            self.load_spans_sum += spans
            self.load_spans_max = max(self.load_spans_max, spans)
            for lag in lags:
                self.load_lag_counts[bisect.bisect_left(LAG_BUCKETS, lag)] += 1
                self.load_lag_sum += lag

    def observe_commit(self, seconds: float) -> None:
        with self._lock:
            self.commits += 1
            self.commit_seconds_sum += seconds
            self.commit_seconds_max = max(self.commit_seconds_max, seconds)

    def render(self) -> str:
        with self._lock:
            rows = [
                ("lousho_spans_accepted_total", "counter", "spans committed", self.spans_accepted),
                ("lousho_spans_rejected_total", "counter",
                 "spans refused: malformed, or repeating an earlier span of their request", self.spans_rejected),
                ("lousho_spans_duplicate_total", "counter", "spans already stored",
                 self.spans_duplicate),
                ("lousho_spans_pruned_total", "counter",
                 "spans past the local window (--local-days) removed from the store once the lake held them",
                 self.spans_pruned),
                ("lousho_values_nulled_total", "counter",
                 "promoted values their column cannot hold, stored as NULL (raw attributes keep them)",
                 self.values_nulled),
                ("lousho_requests_refused_full_total", "counter",
                 "requests refused because the admission queue was full",
                 self.requests_refused_full),
                ("lousho_requests_bad_total", "counter", "requests answered 4xx",
                 self.requests_bad),
                ("lousho_commits_total", "counter", "DuckDB commits", self.commits),
                ("lousho_commit_seconds_sum", "counter", "time spent in commits",
                 self.commit_seconds_sum),
                ("lousho_commit_seconds_max", "gauge", "slowest commit", self.commit_seconds_max),
                ("lousho_checkpoints_total", "counter", "idle checkpoints", self.checkpoints),
                ("lousho_checkpoint_seconds_sum", "counter", "time spent in idle checkpoints",
                 self.checkpoint_seconds_sum),
                ("lousho_trigger_polls_total", "counter",
                 "completed looks of the regression trigger at a registered agent", self.trigger_polls),
                ("lousho_queue_bytes", "gauge", "bytes waiting for the writer", self.queue_bytes),
                ("lousho_queue_capacity_bytes", "gauge", "admission queue capacity",
                 self.queue_capacity_bytes),
                ("lousho_spool_bytes", "gauge", "bytes in the spool (accepted, until loaded and checkpointed)",
                 self.spool_bytes_now() if self.spool_bytes_now is not None else self.spool_bytes),
                ("lousho_spool_capacity_bytes", "gauge", "the spool's bound: past it requests get 503",
                 self.spool_capacity_bytes),
                ("lousho_spool_syncs_total", "counter", "fdatasyncs of the spool (one per group of requests)",
                 self.spool_syncs),
                ("lousho_spool_sync_seconds_sum", "counter", "time spent writing and syncing the spool",
                 self.spool_sync_seconds_sum),
                ("lousho_spool_records_total", "counter", "requests made durable in the spool (acked)",
                 self.spool_records),
                ("lousho_spool_replayed_total", "counter", "accepted requests loaded after a restart",
                 self.spool_replayed),
                ("lousho_spool_spilled_total", "counter",
                 "accepted requests kept on disk only (the loader's memory was spent) and read back",
                 self.spool_spilled),
                ("lousho_spool_unloadable_total", "counter", "accepted requests the store could not take (logged)",
                 self.spool_unloadable),
                ("lousho_spool_damaged_segments_total", "counter", "spool segments found damaged at start",
                 self.spool_damaged_segments),
                ("lousho_load_spans_sum", "counter", "spans in the loader's commits (÷ commits: spans per commit)",
                 self.load_spans_sum),
                ("lousho_load_spans_max", "gauge", "the largest load, in spans", self.load_spans_max),
                ("lousho_loader_lag_seconds", "gauge", "age of the oldest acked request not yet loaded",
                 round(self.lag_now(), 6) if self.lag_now is not None else 0.0),
                ("lousho_store_corrupt", "gauge", "1 once the store file was found damaged",
                 int(self.store_damage is not None)),
                ("lousho_loader_stopped", "gauge", "1 once the loader's thread ended (a restart loads the spool)",
                 int(self.loader_stopped is not None)),
                ("lousho_store_disk_full", "gauge", "1 while the store's disk is full (exports get 503)",
                 int(self.store_disk_full is not None)),
                ("lousho_store_disk_full_total", "counter", "times the store's disk was found full",
                 self.store_disk_full_events),
                ("lousho_requests_refused_disk_full_total", "counter",
                 "requests answered 503 (gRPC UNAVAILABLE) because the store's disk was full",
                 self.requests_refused_disk_full),
                ("lousho_requests_refused_memory_total", "counter",
                 "requests answered 503 (gRPC UNAVAILABLE) because the daemon was at its memory cap",
                 self.requests_refused_memory),
            ]
            if self.lake_state is not None:
                lake = self.lake_state
                rows += [("lousho_lake_position", "gauge", "the local commit the lake holds this daemon's rows up to",
                          lake.position),
                         ("lousho_lake_commits_total", "counter", "commits to the lake", lake.commits),
                         ("lousho_lake_span_rows_total", "counter", "span rows committed to the lake", lake.rows),
                         ("lousho_lake_failing", "gauge", "1 while the last commit to the lake failed",
                          int(lake.last_error is not None)),
                         ("lousho_lake_upkeep_holder", "gauge", "1 while this daemon holds the lake's upkeep lease",
                          int(lake.upkeep_holder)),
                         ("lousho_lake_upkeeps_total", "counter", "lake upkeeps this daemon ran", lake.upkeeps)]
            if self.tls_not_after is not None:
                rows.append(("lousho_tls_cert_expiry_days", "gauge",
                             "days until the TLS certificate expires (negative once it has)",
                             round((self.tls_not_after - time.time()) / 86_400, 3)))
            detectors = dict(self.trigger_detectors)
        if self.fold_now is not None:
            fold = self.fold_now()
            rows += [("lousho_folds_total", "counter", "folds of committed spans into the kept runs", fold.folds),
                     ("lousho_fold_spans_total", "counter", "spans folded into the kept runs", fold.folded_spans),
                     ("lousho_fold_seconds_sum", "counter", "time spent folding", round(fold.fold_seconds, 6)),
                     ("lousho_fold_tail_spans", "gauge", "spans committed and not yet taken by a fold",
                      fold.tail_spans)]
        capped = memory_cap.cap()
        if capped is not None:
            rows += [("lousho_memory_cap_bytes", "gauge", "writable memory the daemon's process may map (--memory-cap)",
                      capped),
                     ("lousho_process_data_bytes", "gauge", "writable memory the daemon's process maps now (VmData)",
                      memory_cap.data_bytes() or 0)]
        lines = []
        for name, kind, help_text, value in rows:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        lines += ["# HELP lousho_decoder_info the OTLP/protobuf decoder this daemon runs",
                  "# TYPE lousho_decoder_info gauge", f'lousho_decoder_info{{decoder="{self.decoder}"}} 1',
                  "# HELP lousho_json_decoder_info the OTLP/JSON decoder this daemon runs",
                  "# TYPE lousho_json_decoder_info gauge",
                  f'lousho_json_decoder_info{{decoder="{self.json_decoder}"}} 1']
        lines += _lag_histogram(list(self.load_lag_counts), self.load_lag_sum)
        lines += _detector_lines(detectors)
        return "\n".join(lines) + "\n"

def _lag_histogram(counts: list[int], total: float) -> list[str]:
    name = "lousho_load_lag_seconds"
    lines = [f"# HELP {name} seconds from a request's ack to the load of its spans", f"# TYPE {name} histogram"]
    running = 0
    for bound, count in zip((*LAG_BUCKETS, float("inf")), counts, strict=True):
        running += count
        le = "+Inf" if bound == float("inf") else repr(bound)
        lines.append(f'{name}_bucket{{le="{le}"}} {running}')
    lines += [f"{name}_sum {round(total, 6)}", f"{name}_count {running}"]
    return lines


def _detector_lines(detectors: dict[str, tuple[str, float, float | None, int, int]]) -> list[str]:
    """One sample per registered agent and metric, labelled by agent and live revision; the threshold is
    NaN while the reference is incomplete (the detector cannot fire then)."""
    if not detectors:
        return []
    metrics = (("lousho_trigger_statistic", "the regression trigger's CUSUM on the agent's live revision", 1),
               ("lousho_trigger_threshold", "the CUSUM's calibrated threshold (NaN: reference incomplete)", 2),
               ("lousho_trigger_reference_runs", "runs in the revision's reference so far", 3),
               ("lousho_trigger_reference_needed", "runs the reference needs before the detector may fire", 4))
    lines = []
    for name, help_text, index in metrics:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for agent, values in sorted(detectors.items()):
            value = values[index]
            shown = "NaN" if value is None else (f"{value:.6g}" if isinstance(value, float) else str(value))
            lines.append(f'{name}{{agent="{_label(agent)}",revision="{_label(values[0])}"}} {shown}')
    return lines


def _label(value: str) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
