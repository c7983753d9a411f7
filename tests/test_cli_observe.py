"""The daemon command both entry points run (``lousho observe`` and ``python -m lousho.observe``) is observe's,
wired with the improve part's check of ``--agent`` and the models part's check of the model URLs: each refuses
at start, before any file is created, with the same code through either door."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lousho.cli import COMMANDS
from lousho.observe.daemon_cli import observe as bare_observe
from lousho.observe.entry import observe as wired_observe

ENTRY_POINTS = {"lousho observe": ["-m", "lousho", "observe"], "python -m lousho.observe": ["-m", "lousho.observe"]}


def start(entry: str, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *ENTRY_POINTS[entry], "--db", str(db), "--port", "0", "--grpc-port", "-1",
                           *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def check(tmp_path: Path) -> Path:
    (tmp_path / "check.py").write_text("def check(input, output):\n    return True\n")
    return tmp_path / "check.py"


@pytest.mark.system
@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(("flags", "code"), [
    (["--agent", "x={tmp}:{check}"], "LOUSHO_OBSERVE_AGENT_DIR_INVALID"),  # no instructions.md
    (["--agent", "x={tmp}/desk:{tmp}/nocheck.py"], "LOUSHO_OBSERVE_AGENT_CHECK_INVALID"),
    (["--agent", "x={tmp}/desk:{check}", "--model-url", "localhost:9/v1"], "LOUSHO_MODELS_CONFIG_INVALID"),
], ids=["harness", "check-module", "model-url"])
def test_both_entry_points_refuse_what_improve_and_models_refuse_before_creating_the_store(
        tmp_path: Path, check: Path, entry: str, flags: list[str], code: str) -> None:
    (tmp_path / "desk").mkdir()
    (tmp_path / "desk" / "instructions.md").write_text("Answer.\n")
    (tmp_path / "nocheck.py").write_text("ANSWER = 42\n")  # imports cleanly, defines no check()
    done = start(entry, tmp_path / "o.duckdb", *(f.format(tmp=tmp_path, check=check) for f in flags))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"error {code}: " in done.stderr and "\nhint: " in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o.duckdb").exists()


def test_the_table_runs_the_wired_command_with_observes_options_and_help() -> None:
    assert COMMANDS["observe"] == "lousho.observe.entry:observe"
    assert [p.name for p in wired_observe.params] == [p.name for p in bare_observe.params]
    assert wired_observe.help == bare_observe.help and wired_observe.callback is not bare_observe.callback
