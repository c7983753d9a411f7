"""The daemon's configuration: click flags (then the environment, read only by the CLI) feed this."""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from lousho.observe import tls_dates
from lousho.observe.errors import LakeIncomplete, TlsIncomplete, TlsUnusable, UnsafeBind

MIB = 1024 * 1024
GIB = 1024 * MIB


def ram_bytes() -> int | None:
    """The machine's physical memory; None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def default_memory_limit() -> int:
    """DuckDB's own default is 80% of RAM, more than a daemon beside an agent should take: 25% of RAM,
    at most 4 GiB."""
    ram = ram_bytes()
    return 4 * GIB if ram is None else min(ram // 4, 4 * GIB)


# What the daemon maps besides DuckDB's working memory and the SQL answers: the interpreter and libraries, thread
# stacks and allocator arenas, the decoded requests (queue_bytes) and the decoders' buffers. Under load it maps
# 3.4 GB of writable memory for 1.5 GB resident (benchmarks/perf/ingest.py); this leaves room above that.
MEMORY_CAP_OVERHEAD = 4 * GIB


def default_memory_cap(memory_limit: int, ram: int | None) -> int:
    """DuckDB's working memory, the answers held at once (as Arrow, then as text: twice the memory limit at
    most, ``sql_query_memory``), and ``MEMORY_CAP_OVERHEAD``: 16 GiB at the default memory limit's most. At most
    three quarters of ``ram``, so that a value the cap lets through fits beside the agent, but never below the
    working memory and the overhead: on a machine under 5.3 GiB that is more than its RAM, and the cap stops only
    values larger than the machine."""
    cap = 3 * memory_limit + MEMORY_CAP_OVERHEAD
    if ram is not None:
        cap = min(cap, ram * 3 // 4)
    return max(cap, memory_limit + MEMORY_CAP_OVERHEAD)


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
    # Bytes of decoded requests the loader holds in memory (past it, it reads them back from the spool), and
    # the budget of bodies being read.
    queue_bytes: int = 256 * MIB
    # The spool (store/spool.py): accepted bodies on disk until loaded and checkpointed; past the bound, 503.
    # None: a quarter of the free disk, between 64 MiB and 4 GiB. The directory: beside the store by default.
    spool_bytes: int | None = None
    spool_dir: Path | None = None
    # The loader appends what arrived within this long in one transaction (at once when a reader waits).
    load_interval_s: float = 0.01
    # A query waits at most this long for the loader to reach the acks sent before it (read your acks).
    read_wait_s: float = 5.0
    retry_after_s: int = 1
    sql_timeout_s: float = 30.0
    sql_max_rows: int = 1_000_000
    # Threads that run SQL queries (as many more may wait); OTLP ingest never shares them.
    sql_workers: int = 4
    # A query's text past this is refused (413) before anything parses it.
    sql_max_query_bytes: int = MIB
    # DuckDB's memory limit for the store (scans, joins, sorts of every query); None: default_memory_limit().
    memory_limit_bytes: int | None = None
    # Arrow bytes one query's answer may hold; None: the memory limit shared by every SQL slot
    # (workers and as many waiting), so answers held at once never pass it.
    sql_query_memory_bytes: int | None = None
    # The writable memory the daemon's process may map (memory_cap.py), so that one huge value a query builds
    # fails that query instead of getting the daemon killed; None: default_memory_cap(); 0: no cap. Applied by
    # `lousho observe` to its own process; serve() embedded in another process leaves that process alone.
    memory_cap_bytes: int | None = None
    # A client that takes nothing of an answer for this long is cut off, and the answer freed.
    send_timeout_s: float = 30.0
    # A pause before each load; a fault point to show a slow store, 0 in real use.
    commit_delay_s: float = 0.0
    # Span keys the writer holds to drop a re-sent span (recent_keys.py); a smaller window shows compaction.
    dedup_window: int = 2 * 1024 * 1024
    # How far below the request path the loader, the fold and DuckDB's workers run (Linux nice; 0: level).
    loader_nice: int = 10
    # Slow clients: a connection must send its whole request head within header_timeout_s and its
    # whole body within body_timeout_s; SIGTERM cancels requests still running after shutdown_timeout_s.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    shutdown_timeout_s: float = 15.0
    # Beyond loopback, the Host names (any port) requests may carry; empty: any (the token guards).
    # On a loopback bind only loopback names are accepted, whatever this says (DNS rebinding).
    allowed_hosts: tuple[str, ...] = ()
    # PEM files; both or neither. With them HTTP is HTTPS and gRPC uses TLS.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # The fleet (lake/): a DuckLake catalog (a Postgres URL, password included, or a catalog file) and its data
    # directory. None: no lake. This daemon's name there (its positions); None: host and store path.
    lake_catalog: str | None = field(default=None, repr=False)
    lake_data: Path | None = None
    lake_name: str | None = None
    # The lake's commits: every this many seconds, what the local store took since.
    lake_every_s: float = 2.0
    # The lake environment's Python (DuckDB 1.5.5 and DuckLake); None: $LOUSHO_LAKE_PYTHON or .venv-lake.
    lake_python: str | None = None
    # The lake's upkeep, by one daemon of the fleet at a time (lake/lake_lease.py), and how long its snapshots stay.
    lake_upkeep_every_s: float = 600.0
    lake_retention_s: float = 7 * 86_400.0
    # In a fleet, the local store keeps this many days of traces (older ones leave once the lake holds them),
    # looked at every local_prune_every_s while the loader is idle; None: the local store keeps everything.
    local_days: float | None = None
    local_prune_every_s: float = 3600.0
    # A query of the lake is interrupted after this long (its runs are computed from the spans, not kept).
    lake_sql_timeout_s: float = 120.0
    # What the page at / shows: this daemon's store ("local") or, in a fleet, every daemon's runs ("lake").
    page_scope: str = "local"

    def validate(self) -> DaemonConfig:
        """Refuse to listen beyond loopback without a token: anyone on the network could read."""
        if not self.token and not is_loopback(self.host):
            raise UnsafeBind(f"refusing to listen on {self.host} without a token")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise TlsIncomplete("--tls-cert and --tls-key go together")
        if self.tls_cert is not None and self.tls_key is not None:
            _check_tls(self.tls_cert, self.tls_key)
        if (self.lake_catalog is None) != (self.lake_data is None):
            raise LakeIncomplete("--lake and --lake-data go together")
        if self.page_scope == "lake" and self.lake_catalog is None:
            raise LakeIncomplete("--page-scope lake needs --lake")
        if self.local_days is not None and self.lake_catalog is None:
            raise LakeIncomplete("--local-days needs --lake: without a lake the old traces would be lost",
                                 hint="give --lake and --lake-data, or leave --local-days out to keep everything")
        return self

    @property
    def memory_limit(self) -> int:
        return self.memory_limit_bytes if self.memory_limit_bytes is not None else default_memory_limit()

    @property
    def sql_query_memory(self) -> int:
        if self.sql_query_memory_bytes is not None:
            return self.sql_query_memory_bytes
        return max(MIB, self.memory_limit // (2 * self.sql_workers))

    @property
    def memory_cap(self) -> int | None:
        """The cap on the daemon's process, None for none."""
        if self.memory_cap_bytes is None:
            return default_memory_cap(self.memory_limit, ram_bytes())
        return self.memory_cap_bytes or None

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert is not None else "http"


def _check_tls(cert: Path, key: Path) -> None:
    """Load the pair once before anything is bound or created, so a bad file (or an expired or not yet
    valid certificate, which verifying clients would refuse) is a usage error."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise TlsUnusable(f"cannot use {cert} with {key}: {e}") from None
    tls_dates.check(cert)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address, without port or brackets) names this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
