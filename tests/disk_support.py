"""A small file system to fill: a tmpfs the test mounts (root only; the test is skipped with the reason
otherwise), and a ballast file that fills it."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

MiB = 1024 * 1024


@contextlib.contextmanager
def tmpfs(mount: Path, size: str = "32m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``mount`` (made if need be) while the block runs."""
    mount.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                              capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("no mount command: a small file system cannot be made")
    if done.returncode != 0:
        pytest.skip(f"mounting a {size} tmpfs was refused (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


def fill_disk(ballast: Path, leave: int) -> None:
    """Fill the file system holding ``ballast``, then give back ``leave`` bytes."""
    block = b"\0" * MiB
    with ballast.open("wb") as f:
        try:
            while True:
                f.write(block)
                f.flush()
        except OSError:
            pass
        try:
            f.flush()
        except OSError:
            pass  # deliberate: what did not fit is simply not written
    os.truncate(ballast, max(0, ballast.stat().st_size - leave))
