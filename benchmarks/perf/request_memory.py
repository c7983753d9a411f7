"""Peak daemon memory for one in-flight request, as a multiple of its (decompressed) body.

A fresh daemon on a temp DuckDB file gets one warm-up request, then one large request (``--spans`` spans:
512-span bodies of the ingest benchmark concatenated, which protobuf reads as one request), sent once plain
and once gzip-compressed to fresh daemons. The figure is the growth of the daemon's peak resident set
(VmHWM) across the request, divided by the decompressed body size. ``--decoder python`` runs the daemon
from a copy of the source tree without the built native module, as a checkout that was not built would.

Not a timed test: run by hand. Everything it starts is stopped in ``finally``; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import shutil
import sys
import tempfile
import urllib.parse
from pathlib import Path

import _common as common

from lousho.observe.process import start_daemon


def post(url: str, body: bytes, encoding: str | None) -> int:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    headers = {"content-type": "application/x-protobuf"}
    if encoding:
        headers["content-encoding"] = encoding
    try:
        conn.request("POST", "/v1/traces", body, headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def measure(body: bytes, warm: bytes, encoding: str | None, decoder: str, workdir: Path) -> dict[str, float]:
    env = {}
    if decoder == "python":
        tree = workdir / "src"
        if not tree.exists():
            shutil.copytree(common.REPO / "lousho", tree / "lousho",
                            ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        env = {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}
    db = workdir / f"memory-{encoding or 'plain'}-{decoder}.duckdb"
    daemon = start_daemon(db, env=env)
    try:
        assert f"decoder={decoder}" in daemon.output[0], daemon.output[0]
        assert post(daemon.url, warm, None) == 200
        before = common.peak_rss_mib(daemon.pid) or 0.0
        sent = gzip.compress(body, 1) if encoding == "gzip" else body
        status = post(daemon.url, sent, encoding)
        after = common.peak_rss_mib(daemon.pid) or 0.0
    finally:
        daemon.stop()
        for path in workdir.glob(db.name + "*"):
            path.unlink()
    if status != 200:
        raise RuntimeError(f"the daemon answered {status}")
    growth = (after - before) * 1024 * 1024
    return {"body_mib": len(body) / 2**20, "wire_mib": len(sent) / 2**20, "peak_before_mib": before,
            "peak_after_mib": after, "growth_per_body_byte": growth / len(body)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spans", type=int, default=51_200, help="spans in the large request (a multiple of 512)")
    p.add_argument("--decoder", choices=["native", "python"], default="native")
    args = p.parse_args(argv)
    templates = common.templates(4, 3, 512)
    body = b"".join(templates[i % 4].stamp() for i in range(args.spans // 512))
    warm = templates[0].stamp()
    print(f"one request of {args.spans:,} spans, {len(body) / 2**20:.1f} MiB; {args.decoder} decoder; "
          f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="lousho-memory-") as tmp:
        for encoding in (None, "gzip"):
            r = measure(body, warm, encoding, args.decoder, Path(tmp))
            print(f"  {encoding or 'identity':8} wire {r['wire_mib']:.1f} MiB: peak RSS {r['peak_before_mib']:.0f} -> "
                  f"{r['peak_after_mib']:.0f} MiB, {r['growth_per_body_byte']:.1f}x the decompressed body")
    print(f"reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
