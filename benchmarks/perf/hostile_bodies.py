"""Two protobuf bodies made to hurt the native decoder, against a real daemon: what each costs it.

* **merged occurrences**: one span whose one attribute holds its array_value as ``--pieces`` occurrences (32,000:
  a 125 KiB body). protobuf merges them; the figure is the growth of the daemon's peak resident set (VmHWM)
  across the request, on a fresh daemon per repeat that has stored one small request first.
* **colliding keys**: one span of 65,536 attribute keys whose unseeded FNV-1a hashes agree in their low 17
  bits (all one slot of the de-duplication table the decoder once hashed that way), beside a body of as many
  ordinary keys of the same length. The figures are the request's round trip and the longest /healthz wait
  while it is in flight, ``--repeats`` times on one daemon (fresh ids each).

Medians over ``--repeats``. Not a timed test: run by hand. Everything it starts is stopped in ``finally``;
traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import os
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import _common as common

from lousho.observe.client.process import start_daemon


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ld(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def tiny_spans_body(spans: int, first: int = 1) -> bytes:
    """The red-team shape of issue 28: one resource and scope, ``spans`` spans of ids, a one-letter name and two
    times, 51 bytes each (200,000: a 9.7 MiB body). Ids count up from ``first``."""
    def fixed64(number: int, value: int) -> bytes:
        return varint(number << 3 | 1) + value.to_bytes(8, "little")

    one = [ld(2, ld(1, i.to_bytes(16, "big")) + ld(2, i.to_bytes(8, "big")) + ld(5, b"s") + fixed64(7, 1)
              + fixed64(8, 2)) for i in range(first, first + spans)]
    service = ld(1, ld(1, b"service.name") + ld(2, ld(1, b"svc")))
    return ld(1, ld(1, service) + ld(2, ld(1, ld(1, b"scope")) + b"".join(one)))


def span_body(trace: bytes, attributes: bytes) -> bytes:
    span = ld(1, trace) + ld(2, b"\x02" * 8) + ld(5, b"chat") + attributes
    return ld(1, ld(2, ld(2, span)))


def merged_body(pieces: int) -> bytes:
    """One attribute whose AnyValue holds ``pieces`` array_value occurrences of one empty element each."""
    return span_body(os.urandom(16), ld(9, ld(1, b"k") + ld(2, ld(5, ld(1, b"")) * pieces)))


def colliding_keys(doublings: int) -> list[bytes]:
    """FNV-1a's low bits depend only on the low bits before: 3-byte blocks taking one 17-bit state to the same
    next state, chained, give 2^doublings keys of one low-17-bit hash."""
    mask, prime = (1 << 17) - 1, 1099511628211
    state = 1469598103934665603 & mask
    pairs = []
    while len(pairs) < doublings:
        seen: dict[int, bytes] = {}
        for block in itertools.product(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", repeat=3):
            h = state
            for byte in block:
                h = ((h ^ byte) * prime) & mask
            if h in seen:
                pairs.append((seen[h], bytes(block)))
                state = h
                break
            seen[h] = bytes(block)
    return [b"".join(choice) for choice in itertools.product(*pairs)]


def keys_body(keys: list[bytes]) -> bytes:
    return span_body(os.urandom(16), b"".join(ld(9, ld(1, key) + ld(2, b"\x18\x01")) for key in keys))


def request(url: str, method: str, path: str, body: bytes | None = None) -> int:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    try:
        conn.request(method, path, body, {"content-type": "application/x-protobuf"} if body else {})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def with_healthz(url: str, body: bytes) -> tuple[float, float]:
    """The request's round trip and the longest /healthz wait while it was in flight, in seconds."""
    took: list[float] = []

    def send() -> None:
        start = time.perf_counter()
        assert request(url, "POST", "/v1/traces", body) == 200
        took.append(time.perf_counter() - start)

    sender = threading.Thread(target=send)
    sender.start()
    waits = [0.0]
    while sender.is_alive():
        start = time.perf_counter()
        assert request(url, "GET", "/healthz") == 200
        waits.append(time.perf_counter() - start)
        time.sleep(0.02)
    sender.join()
    return took[0], max(waits)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pieces", type=int, default=32_000, help="array_value occurrences in the merged body")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    print(f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        grew = []
        size = len(merged_body(args.pieces))
        for i in range(args.repeats):
            daemon = start_daemon(Path(tmp) / f"merged{i}.duckdb")
            try:
                assert request(daemon.url, "POST", "/v1/traces", merged_body(1)) == 200
                before = common.peak_rss_mib(daemon.pid)
                assert request(daemon.url, "POST", "/v1/traces", merged_body(args.pieces)) == 200
                grew.append(common.peak_rss_mib(daemon.pid) - before)
            finally:
                daemon.stop()
        print(f"  merged occurrences: {args.pieces:,} pieces, {size / 1024:.0f} KiB body: daemon peak RSS "
              f"+{common.median(grew):.1f} MiB median (all: {', '.join(f'{g:.1f}' for g in grew)})")

        colliding = colliding_keys(16)
        ordinary = [b"%048d" % i for i in range(len(colliding))]
        daemon = start_daemon(Path(tmp) / "keys.duckdb")
        try:
            for label, keys in (("colliding keys", colliding), ("ordinary keys", ordinary)):
                runs = [with_healthz(daemon.url, keys_body(keys)) for _ in range(args.repeats)]
                print(f"  {label}: {len(keys):,} keys, {len(keys_body(keys)) / 2**20:.2f} MiB body: request "
                      f"{common.median([r[0] for r in runs]):.3f} s median, longest /healthz wait "
                      f"{common.median([r[1] for r in runs]):.3f} s median")
        finally:
            daemon.stop()
    print(f"load after {os.getloadavg()[0]:.2f}; reproduce: {common.reproduce_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
