"""Start and stop ``lousho models serve-scripted`` as a child process (tests and benchmarks use it)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from lousho.kernel._child import Child, NotReady, start_child
from lousho.models.errors import ServerStartFailed

_READY = re.compile(r"lousho models ready url=(\S+)")


@dataclass
class ScriptedProcess(Child):
    url: str


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
    cmd = [sys.executable, "-P", "-m", "lousho.models", "serve-scripted", "--script", str(script),
           "--seed", str(seed), "--port", str(port)]
    if log is not None:
        cmd += ["--log", str(log)]
    try:
        child, ready = start_child(cmd, _READY, env, timeout)
    except NotReady as e:
        raise ServerStartFailed(f"the scripted model server did not start:\n{e}") from None
    return ScriptedProcess(child.process, child.output, child.reader, ready.group(1))
