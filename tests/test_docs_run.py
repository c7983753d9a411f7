"""README.md and docs/quickstart.md run as written: their ``sh`` blocks, taken from the Markdown itself, run in
order in one shell, in a fresh copy of the repository, against real processes (daemons, scripted model
servers, the example agents), and every block shows something.

Conventions the docs follow (so a reader can paste the blocks into one terminal):
- a block right after ``<!-- docs-run: skip ... -->`` is not run (the ``make`` block: the test is what
  comes after it, and the venv it builds is the one running this test);
- a line ending in ``&`` starts a long-running server; the runner waits for its ready line (``READY``)
  before the next line runs, and stops it (SIGTERM) at the end;
- a block of only ``export``, ``source``, ``cd`` and ``cp`` lines may print nothing; every other block
  must print something.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/quickstart.md")
# The docs name these ports; a process already on one would answer in place of the one the docs start.
PORTS = (4317, 4318, 4319, 8000, 8001, 8100)
SKIP = "<!-- docs-run: skip"
QUIET = ("export ", "source ", "cd ", "cp ")
BACKGROUND = re.compile(r"^(?P<cmd>.*[^&\s])\s*&\s*(?P<comment>#.*)?$")
MARK = "@@docs-run block "
# A server is ready once it says so: the daemon's and the model server's ready lines, the recover loop's first.
READY = r"^lousho (observe|models) ready |recovering runs of "
# What the last block of each doc ends with when the story worked, not only when it printed something.
ENDS_WITH = {"README.md": "lousho improve: ", "docs/quickstart.md": "(monitoring)"}


def sh_blocks(markdown: str) -> list[str]:
    """The ``sh`` blocks in order, without those right after a skip comment."""
    blocks, lines, i = [], markdown.splitlines(), 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            end = lines.index("```", i + 1)
            before = next((line for line in reversed(lines[:i]) if line.strip()), "")
            if not before.startswith(SKIP):
                blocks.append("\n".join(lines[i + 1:end]))
            i = end
        i += 1
    return blocks


def is_quiet(block: str) -> bool:
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith((" ", "\t"))]
    return all(line.startswith(QUIET) for line in commands)


def script(blocks: list[str], logs: Path) -> str:
    """One bash script: each block after a marker line, each ``&`` line rewritten to log, wait and clean up."""
    ready = shlex.quote(READY)
    out = [
        "set -eo pipefail",
        "_bg=()",
        'trap \'for p in "${_bg[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait\' EXIT',
        # Ready: the server printed its ready line; gone before that is a failure with its output.
        "_ready() { for _ in $(seq 600); do",
        f'  if grep -q -E {ready} "$1" 2>/dev/null; then grep -m 1 -E {ready} "$1"; return 0; fi',
        '  if ! kill -0 "$2" 2>/dev/null; then echo "background command exited: $3"; cat "$1"; exit 1; fi',
        "  sleep 0.1; done; echo \"not ready in 60 s: $3\"; cat \"$1\"; exit 1; }",
    ]
    n = 0
    for index, block in enumerate(blocks):
        out.append(f"echo {shlex.quote(MARK + str(index))}")
        for line in block.splitlines():
            match = BACKGROUND.match(line)
            if match is None:
                out.append(line)
                continue
            n += 1
            log = logs / f"background-{n}.log"
            out.append(f"{match['cmd']} > {log} 2>&1 & _bg+=($!); _ready {log} $! {shlex.quote(match['cmd'][:60])}")
    return "\n".join(out) + "\n"


def fresh_copy(into: Path) -> Path:
    """The repository's files (tracked, and new ones not ignored) as a fresh clone has them, and its venv."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            (into / name).write_bytes(source.read_bytes())
    (into / ".venv").symlink_to(sys.prefix)  # what `make demo` built
    return into


def environment(clone: Path, home: Path) -> dict[str, str]:
    """A new user's shell: no lousho or OTel variables, the venv not on PATH (the docs say how), and the
    copy's code imported (a clone's editable install would point at it)."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOUSHO_", "OTEL_", "OPENAI_", "VIRTUAL_ENV", "PYTHON"))}
    return {**env, "PATH": path, "HOME": str(home), "PYTHONPATH": str(clone)}


def run_doc(doc: str, tmp_path: Path) -> tuple[list[str], list[str]]:
    blocks = sh_blocks((ROOT / doc).read_text())
    clone = fresh_copy(tmp_path / "clone")
    (tmp_path / "home").mkdir()
    (tmp_path / "logs").mkdir()
    busy = [port for port in PORTS if not _free(port)]
    assert not busy, f"ports the docs use are taken by other processes: {busy}"
    shell = subprocess.Popen(["bash", "-c", script(blocks, tmp_path / "logs")], cwd=clone,
                             env=environment(clone, tmp_path / "home"), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = shell.communicate(timeout=150)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
        shell.stdout.close()  # on a timeout too: an open pipe left to the collector fails the run as a warning
    assert shell.returncode == 0, f"{doc}: exit {shell.returncode}\n{output[-6000:]}"
    shown = output.split(MARK)[1:]
    assert len(shown) == len(blocks), output[-3000:]
    return blocks, [part.split("\n", 1)[1] if "\n" in part else "" for part in shown]


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.parametrize("doc", DOCS)
def test_every_command_block_of_the_doc_runs_as_written_and_shows_something(doc, tmp_path):
    blocks, shown = run_doc(doc, tmp_path)
    assert len(blocks) >= 3
    assert ENDS_WITH[doc] in shown[-1], f"{doc}: the last block did not get to {ENDS_WITH[doc]!r}:\n{shown[-1]}"
    for block, out in zip(blocks, shown, strict=True):
        assert out.strip() or is_quiet(block), f"{doc}: this block printed nothing:\n{block}"
        assert "Traceback" not in out, f"{doc}:\n{block}\n{out}"
        assert "\n0 rows" not in "\n" + out, f"{doc}: a query answered no rows:\n{block}\n{out}"
