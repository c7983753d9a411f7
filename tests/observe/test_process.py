"""Starting the daemon as a child process (tests, the demo and benchmarks do)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lousho.observe.client.process import start_daemon
from lousho.observe.errors import ObserveError


@pytest.mark.system
def test_a_daemon_that_prints_nothing_fails_to_start_at_the_deadline(tmp_path: Path) -> None:
    """The wait for the ready line honours its timeout even while the child holds its output open."""
    hold = tmp_path / "site"
    hold.mkdir()
    # Runs at interpreter start-up, before the daemon prints anything.
    (hold / "sitecustomize.py").write_text("import time\ntime.sleep(20)\n")
    path = os.pathsep.join(filter(None, [str(hold), os.environ.get("PYTHONPATH")]))
    started = time.monotonic()
    with pytest.raises(ObserveError) as raised:
        start_daemon(tmp_path / "observe.duckdb", env={"PYTHONPATH": path}, timeout=1.0)
    assert raised.value.code == "LOUSHO_OBSERVE_START_FAILED"
    assert time.monotonic() - started < 15
