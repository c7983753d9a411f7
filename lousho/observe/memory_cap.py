"""The daemon's memory cap: a bound on the writable memory its process may map (``RLIMIT_DATA``).

DuckDB counts its working memory against ``--memory-limit``, but not one value a query builds: ``SELECT
len(range(3000000000))`` asks the allocator for 24 GB at once, and ``repeat('x', 3000000000)`` for 3 GB.
Without a cap the kernel grants it and, short of memory, kills the daemon. Under the cap the allocation
fails as it is asked for: DuckDB raises its out-of-memory error, the query is answered
``LOUSHO_SQL_OUT_OF_MEMORY``, and nothing else is touched (the request is refused whole, before any of it
is used). A commit or a decode that meets the cap instead, while a query holds memory close to it, fails
the same way and is retried (store/writer.py), and a request gets a retryable refusal: the daemon lives.

The cap counts address space, not resident pages (config.default_memory_cap says what the default leaves
room for). DuckDB's allocator (the jemalloc built into its module) keeps the address space of what it frees, for
its own reuse: after one large value granted under the cap, the daemon would stay at the cap and refuse the rest
(a 1.6 GB list left it at its 4 GiB cap, its next commits refused). ``before_duckdb_loads`` has it give the space
back instead; jemalloc reads that once, as DuckDB's module loads, so the daemon's entry points call it before
anything imports duckdb. Only the soft limit is lowered, and children inherit it: the lake's
worker keeps it (it runs SQL too); an improvement cycle (the agent's own code) is given the hard limit back
(``release``).
"""

from __future__ import annotations

import os
import resource

from lousho.observe.config import GIB

# Below this the daemon could not run under its own overhead: a usage error.
MIN_CAP = GIB
# The environment variable DuckDB's jemalloc reads its options from, and the option that unmaps what it frees.
ALLOCATOR_CONF = ("DUCKDB_JE_MALLOC_CONF", "retain:false")


def before_duckdb_loads() -> None:
    """Have DuckDB's allocator give back the address space it frees (a value the user set is kept). Call it before
    anything imports duckdb: later it changes nothing."""
    os.environ.setdefault(*ALLOCATOR_CONF)


def data_bytes() -> int | None:
    """The writable memory this process maps now (``VmData``), what the cap bounds; None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cap() -> int | None:
    """The cap in force on this process (its soft limit), None when there is none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    return None if soft == resource.RLIM_INFINITY else soft


def apply(limit: int) -> int:
    """Cap this process at ``limit`` bytes, or at a lower cap already in force; returns the cap now in force.
    Call it once, in the daemon's own process (``lousho observe``), never in a process that embeds the daemon."""
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    for bound in (soft, hard):
        if bound != resource.RLIM_INFINITY:
            limit = min(limit, bound)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    return limit


def release(pid: int) -> None:
    """Give the child ``pid`` the hard limit as its soft one: it inherited the daemon's cap, which is sized
    for the daemon, not for it. A child that has already exited, or one this process may not change, is left
    alone (with the cap)."""
    try:
        _, hard = resource.prlimit(pid, resource.RLIMIT_DATA)
        resource.prlimit(pid, resource.RLIMIT_DATA, (hard, hard))
    except OSError:  # deliberate: gone already, or not ours to change; the child runs under the cap then
        pass
