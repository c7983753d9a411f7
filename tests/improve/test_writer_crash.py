"""An apply killed at any point leaves one whole revision, and the audit log says which (STYLE §14: crash by
crashing). A child process writes an edit that changes, removes and adds harness files and SIGKILLs itself at
a named fault point (``LOUSHO_IMPROVE_FAULT``); then the next command (status, audit --verify, revision, or
the next write) finds the harness at exactly the old or the new revision, no staged file left anywhere, the
agent's other files untouched, an audit chain that verifies, and a log whose last word on the harness is the
revision it holds (an ``apply-undone`` line closing the begun apply when it was cut short)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lousho.improve import audit, writer
from lousho.improve.cli import improve
from lousho.improve.harness import Harness, harness_revision
from lousho.improve.state import Paths

OLD = {"instructions.md": "You keep the ledger.\n",
       "skills/alpha/SKILL.md": "---\ndescription: Old notes.\n---\nAdd with the add tool.\n"}
NEW = {"instructions.md": "You keep the ledger. Check every sum twice.\n",
       "skills/beta/SKILL.md": "---\ndescription: New notes.\n---\nSubtract with the sub tool.\n"}
TOOLS = "def add(numbers):\n    return sum(numbers)\n"
OLD_REV, NEW_REV = Harness(OLD).revision, Harness(NEW).revision
FAULT_ENV, TRACE_ENV = "LOUSHO_IMPROVE_FAULT", "LOUSHO_IMPROVE_FAULT_TRACE"  # lousho.improve.faults

# Every point an apply of that edit passes, in order (instructions.md replaced, alpha removed, beta added);
# test_the_fault_points_are_every_point_an_apply_passes keeps this list honest.
POINTS = ["saved", "audit:apply-begin:written", "begun", "staged:0", "staged:2", "replaced:0", "unlinked:1",
          "replaced:1", "replaced:2", "written", "audit:apply:written", "done"]
COMMITTED = {"audit:apply:written", "done"}  # the apply's own line is written: the new revision stands

CHILD = """
import sys
from pathlib import Path
from lousho.improve import writer
from lousho.improve.harness import Harness
from lousho.improve.state import Paths
writer.write(Paths(Path(sys.argv[1])), Harness(dict(zip(sys.argv[2::2], sys.argv[3::2]))), expected=sys.argv[-1],
             action="apply", by="test")
"""


def make_agent(root: Path) -> Path:
    agent = root / "agent"
    for rel, text in OLD.items():
        (agent / rel).parent.mkdir(parents=True, exist_ok=True)
        (agent / rel).write_text(text, encoding="utf-8")
    (agent / "tools.py").write_text(TOOLS, encoding="utf-8")
    return agent


def apply_in_child(agent: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    args = [x for rel, text in NEW.items() for x in (rel, text)]
    return subprocess.run([sys.executable, "-c", CHILD, str(agent), *args, OLD_REV], capture_output=True, text=True,
                          env={**_environ(), **env}, timeout=60)


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, TRACE_ENV)}


def logged_revision(paths: Paths) -> str:
    """The revision the audit log says the harness is at: the last write or recovery line's."""
    revision = OLD_REV
    for entry in audit.entries(paths):
        if entry["action"] in ("apply", "rollback"):
            revision = entry["after"]
        elif entry["action"] in ("apply-undone", "apply-completed"):
            revision = entry["revision"]
    return revision


def assert_whole(agent: Path, expected: str) -> None:
    paths = Paths(agent)
    assert harness_revision(agent) == expected
    files = {p.relative_to(agent).as_posix(): p.read_text(encoding="utf-8")
             for p in agent.rglob("*") if p.is_file() and ".lousho" not in p.parts}
    assert files == {**(NEW if expected == NEW_REV else OLD), "tools.py": TOOLS}  # no .tmp, nothing else touched
    assert not [p for p in (agent / ".lousho").iterdir() if p.name.endswith(".tmp")]
    assert sorted(p.name for p in (agent / "skills").iterdir()) == (["beta"] if expected == NEW_REV else ["alpha"])
    verdict = audit.verify(paths)
    assert verdict.ok, verdict.reason
    assert logged_revision(paths) == expected
    begins = [e for e in audit.entries(paths) if e["action"] == "apply-begin"]
    closers = {e["begun"]: e["action"] for e in audit.entries(paths) if "begun" in e}
    assert all(b["seq"] in closers for b in begins)  # every begun apply is closed: done or undone
    assert set(closers.values()) <= {"apply", "rollback", "apply-undone"}


def next_command(agent: Path, which: str, committed: bool) -> None:
    """The first thing to touch the directory after the crash; each must find and repair a half-applied edit.
    ``write`` is the next write: a rollback of a committed apply, else the apply tried again."""
    runner = CliRunner()
    if which == "write":
        if committed:
            writer.write(Paths(agent), Harness(OLD), expected=NEW_REV, action="rollback", reason="by a person")
        else:
            writer.write(Paths(agent), Harness(NEW), expected=OLD_REV, action="apply", by="test")
        return
    args = {"status": ["status", str(agent), "--json"], "verify": ["audit", str(agent), "--verify"],
            "revision": ["revision", str(agent)]}[which]
    result = runner.invoke(improve, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    if which == "status":
        data = json.loads(result.stdout)
        assert data["audit"]["ok"]
        assert data["revision"] in (OLD_REV, NEW_REV)
    if which == "revision":
        assert result.stdout.split()[-1] in (OLD_REV, NEW_REV)


@pytest.mark.parametrize("point", POINTS)
def test_an_apply_killed_at_any_point_leaves_one_whole_revision_and_says_so(tmp_path: Path, point: str):
    agent = make_agent(tmp_path)
    crashed = apply_in_child(agent, {FAULT_ENV: point})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, crashed.stderr)

    which = ("status", "verify", "revision", "write")[POINTS.index(point) % 4]
    committed = point in COMMITTED
    next_command(agent, which, committed)
    expected = NEW_REV if committed != (which == "write") else OLD_REV
    assert_whole(agent, expected)
    if point not in COMMITTED and POINTS.index(point) > POINTS.index("saved"):
        undone = [e for e in audit.entries(Paths(agent)) if e["action"] == "apply-undone"]
        assert len(undone) == 1 and undone[0]["revision"] == OLD_REV


def test_a_recovery_killed_mid_undo_is_finished_by_the_next_command(tmp_path: Path):
    agent = make_agent(tmp_path)
    assert apply_in_child(agent, {FAULT_ENV: "replaced:1"}).returncode == -signal.SIGKILL
    recovering = subprocess.run([sys.executable, "-m", "lousho.improve.audit_cli", str(agent), "--verify"],
                                capture_output=True, text=True, env={**_environ(), FAULT_ENV: "recover:replaced:0"},
                                timeout=60)
    assert recovering.returncode == -signal.SIGKILL, recovering.stdout + recovering.stderr
    result = CliRunner().invoke(improve, ["audit", str(agent), "--verify"], catch_exceptions=False)
    assert result.exit_code == 0 and "apply-undone" in result.stdout, result.stdout
    assert_whole(agent, OLD_REV)


def test_the_fault_points_are_every_point_an_apply_passes(tmp_path: Path):
    agent = make_agent(tmp_path)
    trace = tmp_path / "trace.txt"
    done = apply_in_child(agent, {TRACE_ENV: str(trace)})
    assert done.returncode == 0, done.stderr
    assert trace.read_text().split() == POINTS
    assert_whole(agent, NEW_REV)
