"""A server started as a child process, ready once it prints its ready line (the daemon, the model server).

A leaf module: it imports nothing of ours, so observe and models may both use it; each turns
:class:`NotReady` into its own coded error.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass


class NotReady(Exception):
    """The child exited or stayed silent past the deadline; it is killed and ``output`` holds what it printed."""

    def __init__(self, output: list[str]) -> None:
        super().__init__("\n".join(output[-20:]))
        self.output = output


@dataclass
class Child:
    """A running child whose stdout and stderr a thread keeps reading into ``output``, so it never blocks
    on a full pipe."""

    process: subprocess.Popen[str]
    output: list[str]
    reader: threading.Thread

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait (the child drains what it holds); returns the exit code, 0 after a clean stop."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self._close()
        return code

    def kill(self) -> None:
        """SIGKILL: nothing drained (for crash tests)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)
        self._close()

    def _close(self) -> None:
        self.reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_child(cmd: Sequence[str], ready: re.Pattern[str], env: dict[str, str] | None,
                timeout: float) -> tuple[Child, re.Match[str]]:
    """Start ``cmd`` (``env`` over this process's environment) and wait for a line matching ``ready``.

    Returns the child and the ready line's match. Raises :class:`NotReady` when the child exits or
    prints no ready line within ``timeout``.
    """
    process = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, **(env or {})})
    output: list[str] = []
    found = threading.Event()
    match: list[re.Match[str]] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            if not match and (hit := ready.search(line)):
                match.append(hit)
                found.set()
        found.set()

    # Read on a thread, so a child that prints nothing cannot block us past the deadline.
    reader = threading.Thread(target=read, name=f"child-output:{process.pid}", daemon=True)
    reader.start()
    found.wait(timeout)
    child = Child(process, output, reader)
    if not match:
        child.kill()
        raise NotReady(output)
    return child, match[0]
