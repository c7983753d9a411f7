"""Start and stop ``lousho observe`` as a child process (the demo, tests and benchmarks use it)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lousho.observe.errors import ObserveError

_READY = re.compile(r"lousho observe ready http=(\S+)(?: grpc=(\S+))? db=")


@dataclass
class DaemonProcess:
    process: subprocess.Popen[str]
    url: str
    grpc_target: str | None
    db: Path
    output: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait for the drain; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self._close_pipe()
        return code

    def kill(self) -> None:
        """SIGKILL: no drain, no checkpoint (for crash tests)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.reader is not None:
            self.reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


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
        sys.executable, "-m", "lousho.observe", "--db", str(db),
        "--port", str(port), "--grpc-port", str(grpc_port), *args,
    ]
    process = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    output: list[str] = []
    deadline = time.monotonic() + timeout
    match = None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        output.append(line.rstrip("\n"))
        match = _READY.search(line)
        if match:
            break
    if match is None:
        process.kill()
        process.wait()
        process.stdout.close()
        raise ObserveError("the daemon did not start:\n" + "\n".join(output[-20:]),
                           code="LOUSHO_OBSERVE_START_FAILED")
    # Keep reading its output so the pipe never fills and blocks the daemon.
    reader = threading.Thread(target=_drain, args=(process, output), daemon=True)
    reader.start()
    return DaemonProcess(process, match.group(1), match.group(2), db, output, reader)


def _drain(process: subprocess.Popen[str], output: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line.rstrip("\n"))
