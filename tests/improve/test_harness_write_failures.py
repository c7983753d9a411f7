"""A write the file system refuses (a plain file where a skill folder must go, a full disk) is undone and
reported as LOUSHO_IMPROVE_WRITE_FAILED with a hint, never a traceback; the harness stays as it was and the
audit log says what happened."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lousho.improve import audit
from lousho.improve.harness import read_harness
from lousho.improve.state import Paths
from lousho.improve.writer import write
from lousho.kernel.errors import LoushoError

SKILL = "---\ndescription: Note rules.\n---\nOne note per item.\n"


def lousho(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "lousho", *args], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent)


def files(agent: Path) -> dict[str, bytes]:
    return {p.relative_to(agent).as_posix(): p.read_bytes() for p in sorted(agent.rglob("*"))
            if p.is_file() and ".lousho" not in p.parts}


def test_a_rollback_the_file_system_refuses_is_a_coded_error_and_changes_nothing(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    (agent / "skills" / "notes").mkdir(parents=True)
    (agent / "instructions.md").write_text("You keep the ledger.\n", encoding="utf-8")
    (agent / "skills" / "notes" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    paths = Paths(agent)
    with_skill = read_harness(agent)
    without = type(with_skill)({"instructions.md": with_skill.instructions})
    write(paths, without, expected=with_skill.revision, action="apply", by="test")  # saves both revisions
    # Someone puts a plain file where the skill folder was: the harness is unchanged (plain files under
    # skills/ are not skills), but restoring skills/notes/SKILL.md cannot make its folder.
    (agent / "skills" / "notes").write_text("scratch\n", encoding="utf-8")
    before = files(agent)

    done = lousho("improve", "rollback", str(agent), "--to", with_skill.revision)

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "error LOUSHO_IMPROVE_WRITE_FAILED" in done.stderr and "hint:" in done.stderr
    assert files(agent) == before
    assert read_harness(agent).revision == without.revision
    assert audit.verify(paths).ok
    assert [e["action"] for e in audit.entries(paths)][-2:] == ["apply-begin", "apply-undone"]


@pytest.mark.parametrize("revision", ["a" * 300, "../../agent", "tools.py/x", "0123456789ABCDEF"])
def test_a_rollback_to_a_name_that_is_no_revision_is_a_coded_error(tmp_path: Path, revision: str) -> None:
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "instructions.md").write_text("You keep the ledger.\n", encoding="utf-8")
    (agent / "tools.py").write_text("x = 1\n", encoding="utf-8")
    Paths(agent).revisions.mkdir(parents=True)
    before = files(agent)

    done = lousho("improve", "rollback", str(agent), "--to", revision)

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "error LOUSHO_IMPROVE_REVISION_MISSING" in done.stderr and "hint:" in done.stderr
    assert files(agent) == before


def test_an_approved_edit_to_a_skill_that_became_read_only_is_refused(tmp_path: Path) -> None:
    # A proposal queued while skills/notes held only its SKILL.md; then a person added a script the SKILL.md
    # describes. The harness's revision is the same (it hashes SKILL.md files only), so the stale check passes,
    # but the skill is read-only now: the writer must not change it.
    agent = tmp_path / "agent"
    (agent / "skills" / "notes").mkdir(parents=True)
    (agent / "instructions.md").write_text("You keep the ledger.\n", encoding="utf-8")
    (agent / "skills" / "notes" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    paths = Paths(agent)
    base = read_harness(agent)
    edited = base.with_file("skills/notes/SKILL.md", SKILL + "Number the notes.\n")
    (agent / "skills" / "notes" / "count.py").write_text("print(1)\n", encoding="utf-8")
    assert read_harness(agent).revision == base.revision
    before = files(agent)

    with pytest.raises(LoushoError) as raised:
        write(paths, edited, expected=base.revision, action="apply", by="person")

    assert raised.value.code == "LOUSHO_IMPROVE_WRITE_REFUSED" and "read-only" in raised.value.message
    assert files(agent) == before
    assert audit.entries(paths)[-1]["reason"] == "read-only" and audit.verify(paths).ok


def test_a_folder_named_like_a_staged_file_is_left_alone_not_a_traceback(tmp_path: Path) -> None:
    # Recovery removes staged files (.<name>.lousho-<pid>.tmp) a killed write left; a folder of that name is
    # not one of them (the writer stages files only) and must not make every improve command fail.
    agent = tmp_path / "agent"
    (agent / ".instructions.md.lousho-99999.tmp").mkdir(parents=True)
    (agent / ".instructions.md.lousho-99999.tmp" / "keep.txt").write_text("mine\n", encoding="utf-8")
    (agent / "instructions.md").write_text("You keep the ledger.\n", encoding="utf-8")
    before = files(agent)

    done = lousho("improve", "status", str(agent))

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert files(agent) == before
