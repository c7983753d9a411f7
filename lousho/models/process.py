"""Start and stop ``lousho models serve-scripted`` as a child process (tests and benchmarks use it)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lousho.models.errors import ServerStartFailed

_READY = re.compile(r"lousho models ready url=(\S+)")


@dataclass
class ScriptedProcess:
    process: subprocess.Popen[str]
    url: str
    output: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code (0 after a clean stop)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self._close()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)
        self._close()

    def _close(self) -> None:
        if self.reader is not None:
            self.reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_scripted(
    script: Path,
    *,
    seed: int = 0,
    port: int = 0,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> ScriptedProcess:
    """Start a scripted model server on ``script`` and wait for its ready line.

    Raises ServerStartFailed with the child's output when it exits or stays silent instead.
    """
    cmd = [sys.executable, "-m", "lousho.models", "serve-scripted", "--script", str(script),
           "--seed", str(seed), "--port", str(port)]
    if log is not None:
        cmd += ["--log", str(log)]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, **(env or {})})
    assert process.stdout is not None
    output: list[str] = []
    # Read on a thread, so a child that prints nothing cannot block us past the deadline.
    ready = threading.Event()
    match: list[re.Match[str]] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            if not match and (found := _READY.search(line)):
                match.append(found)
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(timeout)
    if not match:
        if process.poll() is None:
            process.kill()
        process.wait(30)
        reader.join(10)
        process.stdout.close()
        raise ServerStartFailed("the scripted model server did not start:\n" + "\n".join(output[-20:]))
    # The reader keeps draining the pipe, so the child never blocks on a full one.
    return ScriptedProcess(process, match[0].group(1), output, reader)
