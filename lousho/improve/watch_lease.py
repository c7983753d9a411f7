"""One watcher per agent directory: a lease of two intervals in ``.lousho/watcher.lease``.

A watcher takes the lease when it is free or lapsed and renews it every tick; a second watcher on
the same directory sees a live lease held by someone else and does no work. If the holder dies, the
lease lapses after two intervals and another watcher takes over. The read-check-write is under an
``fcntl`` lock, so two watchers starting together cannot both win.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from lousho.improve.state import Paths, iso, parse_iso, write_json


@dataclass(frozen=True)
class Lease:
    owner: str
    expires_at: str


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def acquire(paths: Paths, owner: str, interval_seconds: float, now: datetime) -> tuple[bool, Lease | None]:
    """Take or renew the lease for two intervals; (True, lease) when ``owner`` holds it afterwards,
    (False, the holder's lease) when another live watcher does."""
    paths.ensure()
    with (paths.root / "watcher.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = _read(paths)
        if current is not None and current.owner != owner and parse_iso(current.expires_at) > now:
            return False, current
        lease = Lease(owner, iso(now + timedelta(seconds=2 * interval_seconds)))
        write_json(paths.lease, {"owner": lease.owner, "expires_at": lease.expires_at})
        return True, lease


def release(paths: Paths, owner: str) -> None:
    paths.ensure()
    with (paths.root / "watcher.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = _read(paths)
        if current is not None and current.owner == owner:
            paths.lease.unlink(missing_ok=True)


def _read(paths: Paths) -> Lease | None:
    try:
        data = json.loads(paths.lease.read_text(encoding="utf-8"))
        return Lease(str(data["owner"]), str(data["expires_at"]))
    except (FileNotFoundError, ValueError, KeyError):
        return None
