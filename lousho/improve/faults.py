"""Fault points of the writer, for crash tests: ``LOUSHO_IMPROVE_FAULT=<point>`` makes the process SIGKILL
itself when it reaches that point, as a power cut or an OOM kill would stop it there.

The tests crash a real child process at every point of an apply and check that the next command finds one
whole revision. ``LOUSHO_IMPROVE_FAULT_TRACE=<file>`` appends each point reached, one a line, so a test can
tell that it covered them all. Unset (always, outside tests) a point costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "LOUSHO_IMPROVE_FAULT"
TRACE_ENV = "LOUSHO_IMPROVE_FAULT_TRACE"


def point(name: str) -> None:
    trace = os.environ.get(TRACE_ENV)
    if trace:
        with open(trace, "a", encoding="utf-8") as f:
            f.write(name + "\n")
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
