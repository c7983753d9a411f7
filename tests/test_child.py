"""A server started as a child process: ready on its ready line, reported (and killed) otherwise."""

from __future__ import annotations

import re
import sys
import time

import pytest

from lousho.kernel._child import NotReady, start_child

READY = re.compile(r"ready port=(\d+)")


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.mark.system
def test_the_ready_line_is_matched_and_the_output_keeps_being_read() -> None:
    code = ("import time\nprint('starting'); print('ready port=7', flush=True)\n"
            "for i in range(3): print('line', i, flush=True)\ntime.sleep(30)")
    child, ready = start_child(python(code), READY, None, timeout=30)
    try:
        assert ready.group(1) == "7"
        deadline = time.monotonic() + 30
        while len(child.output) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.output == ["starting", "ready port=7", "line 0", "line 1", "line 2"]
    finally:
        child.kill()
    assert child.process.returncode is not None


@pytest.mark.system
def test_a_child_that_prints_nothing_is_killed_at_the_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(NotReady) as raised:
        start_child(python("import time; print('thinking', flush=True); time.sleep(60)"), READY, None, timeout=0.5)
    # Not the child's 60 s: the wait does not hang on a pipe the child keeps open and silent.
    assert time.monotonic() - started < 30
    assert raised.value.output == ["thinking"]


@pytest.mark.system
def test_a_child_that_exits_is_reported_with_what_it_printed() -> None:
    with pytest.raises(NotReady) as raised:
        start_child(python("import sys; print('no such store'); sys.exit(2)"), READY, {"X": "1"}, timeout=30)
    assert "no such store" in str(raised.value)
