"""Fault points of the request path, the spool and the loader, for crash tests: ``LOUSHO_OBSERVE_FAULT=<point>:<n>``
makes the daemon SIGKILL itself the ``n``-th time it reaches that point (``n`` 1 when left out), as a power cut or
an OOM kill would stop it there; ``<point>:<n>:memory`` raises MemoryError there instead, as an allocation refused
at the daemon's memory cap (memory_cap.py) would.

The points sit at the boundaries of durability: a body written but not synced, synced but not acked, a load
committed, a segment deleted. The tests kill a real daemon at each under the OTel exporters and check that
every acked span is in the store exactly once after a restart. Unset (always, outside tests) a point costs
one comparison: the variable is read once, at import.
"""

from __future__ import annotations

import os
import signal
import threading

FAULT_ENV = "LOUSHO_OBSERVE_FAULT"
POINTS = ("receive.checked", "spool.written", "spool.synced", "loader.committed", "spool.deleted")

_name, _, _rest = os.environ.get(FAULT_ENV, "").partition(":")
_count, _, _kind = _rest.partition(":")
_left = int(_count or 1) if _name else 0
_lock = threading.Lock()


def point(name: str) -> None:
    global _left
    if name != _name:
        return
    with _lock:
        _left -= 1
        if _left == 0:
            if _kind == "memory":
                raise MemoryError(f"fault point {name}")
            os.kill(os.getpid(), signal.SIGKILL)
