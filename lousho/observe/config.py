"""The daemon's configuration: click flags (then the environment, read only by the CLI) feed this."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from lousho.observe.errors import UnsafeBind

MIB = 1024 * 1024


@dataclass(frozen=True)
class DaemonConfig:
    db: Path = Path(".lousho/observe.duckdb")
    host: str = "127.0.0.1"
    port: int = 4318
    # None: no gRPC listener.
    grpc_port: int | None = 4317
    token: str | None = field(default=None, repr=False)
    # OTLP: the server MUST cap the body, after decompression too; 64 MiB is the recommended default.
    max_body_bytes: int = 64 * MIB
    # Bytes of decoded requests waiting for the writer before new ones are refused with 503.
    queue_bytes: int = 256 * MIB
    retry_after_s: int = 1
    sql_timeout_s: float = 30.0
    sql_max_rows: int = 1_000_000
    # Threads that run SQL queries (as many more may wait); OTLP ingest never shares them.
    sql_workers: int = 4
    # A pause before each commit; a fault point to show backpressure, 0 in real use.
    commit_delay_s: float = 0.0
    # The recover part's SQLite run store the page shows (pending, quarantined, outage); None: not shown.
    recover_store: Path | None = None

    def validate(self) -> DaemonConfig:
        """Refuse to listen beyond loopback without a token: anyone on the network could read."""
        if not self.token and not is_loopback(self.host):
            raise UnsafeBind(f"refusing to listen on {self.host} without a token")
        return self


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
