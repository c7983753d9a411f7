"""Start and stop ``lousho observe`` as a child process (the demo, tests and benchmarks use it)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from lousho.kernel._child import Child, NotReady, start_child
from lousho.observe.errors import ObserveError

_READY = re.compile(r"lousho observe ready http=(\S+)(?: grpc=(\S+))? db=")


@dataclass
class DaemonProcess(Child):
    url: str
    grpc_target: str | None
    db: Path


def start_daemon(
    db: Path,
    *args: str,
    port: int = 0,
    grpc_port: int = 0,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> DaemonProcess:
    """Start a daemon on ``db`` (free ports by default) and wait until it accepts requests."""
    cmd = [
        sys.executable, "-P", "-m", "lousho.observe", "--db", str(db),
        "--port", str(port), "--grpc-port", str(grpc_port), *args,
    ]
    try:
        child, ready = start_child(cmd, _READY, env, timeout)
    except NotReady as e:
        raise ObserveError(f"the daemon did not start:\n{e}", code="LOUSHO_OBSERVE_START_FAILED") from None
    return DaemonProcess(child.process, child.output, child.reader, ready.group(1), ready.group(2), db)
