"""The loader on a machine busy with other work: what its lowered priority (``--loader-nice``) costs there.

    .venv/bin/python benchmarks/perf/busy_machine.py [--busy 3] [--seconds 45] [--rate 10000] [--nice 10 0]

For each ``--nice``: a daemon on a fresh store; ``--busy`` processes that only spin (CPU-bound work at nice 0
beside the daemon); one sender posting the benchmark's 1,000-span bodies over HTTP at ``--rate`` spans a second
(a rate an idle daemon loads with most of a core to spare) for ``--seconds``. Printed per
setting: the requests acked, the loads committed, the loader's lag at the end (``lousho_loader_lag_seconds``),
the spool's bytes, and whether the daemon warned that its loader was behind. docs/observe.md quotes a run.
"""

from __future__ import annotations

import argparse
import http.client
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import _common as common

from lousho.observe.client.process import DaemonProcess, start_daemon

SPANS_PER_BODY = 1000


def _metric(daemon: DaemonProcess, name: str) -> float:
    return common.metric_value(common.daemon_metrics(daemon.url), name)


def _send_for(daemon: DaemonProcess, seconds: float, rate: float) -> int:
    """Post fresh bodies at ``rate`` spans a second for ``seconds``; the requests acked."""
    templates = common.templates(8, seed=7, spans_per_body=SPANS_PER_BODY)
    parts = urllib.parse.urlsplit(daemon.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    acked = 0
    started = time.monotonic()
    sent = 0
    try:
        while (now := time.monotonic()) < started + seconds:
            due = started + sent * SPANS_PER_BODY / rate
            if due > now:
                time.sleep(due - now)
            sent += 1
            conn.request("POST", "/v1/traces", templates[acked % len(templates)].stamp(),
                         {"content-type": "application/x-protobuf"})
            response = conn.getresponse()
            response.read()
            acked += response.status == 200
    finally:
        conn.close()
    return acked


def run(nice: int, busy: int, seconds: float, rate: float, directory: Path) -> dict[str, float | bool]:
    daemon = start_daemon(directory / f"nice{nice}" / "observe.duckdb", "--loader-nice", str(nice))
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        acked = _send_for(daemon, seconds, rate)
        result: dict[str, float | bool] = {
            "acked requests": acked,
            "loads": _metric(daemon, "lousho_commits_total"),
            "lag s": _metric(daemon, "lousho_loader_lag_seconds"),
            "spool MiB": _metric(daemon, "lousho_spool_bytes") / 2**20,
        }
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        daemon.stop()
    result["warned"] = any("behind the acks" in line for line in daemon.output)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=3, help="processes spinning beside the daemon")
    parser.add_argument("--seconds", type=float, default=45.0, help="how long the sender posts")
    parser.add_argument("--rate", type=float, default=10_000, help="spans a second the sender offers")
    parser.add_argument("--nice", type=int, nargs="+", default=[10, 0], help="the loader priorities to compare")
    args = parser.parse_args()
    print(f"# {common.reproduce_command()}")
    with tempfile.TemporaryDirectory() as directory:
        for nice in args.nice:
            result = run(nice, args.busy, args.seconds, args.rate, Path(directory))
            shown = [f"{key} {value:.2f}" if isinstance(value, float) else f"{key} {value}"
                     for key, value in result.items()]
            print(f"--loader-nice {nice}: " + ", ".join(shown), flush=True)


if __name__ == "__main__":
    main()
