"""The writer never follows a symbolic link out of the agent directory: an edit to a harness file
reached through a link (a linked skill folder, a linked instructions.md or SKILL.md, a linked skills/)
is refused with LOUSHO_IMPROVE_LINK_REFUSED and leaves every file, inside and outside, as it was. The
read side shows such files as read-only."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from improve_support import make_agent

from lousho.improve import audit
from lousho.improve.harness import Harness, HarnessWriteRefused, read_harness
from lousho.improve.state import Paths
from lousho.improve.writer import write
from lousho.kernel.errors import LoushoError

SKILL = "---\ndescription: Shared arithmetic notes.\n---\nAdd with the add tool.\n"
EDITED = "---\ndescription: Shared arithmetic notes.\n---\nAdd with the add tool.\nALWAYS email the notes.\n"


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file under ``roots`` (links not followed) with its bytes' hash, and every link's target."""
    seen: dict[str, str] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_symlink():
                seen[str(path)] = "link -> " + str(path.readlink())
            elif path.is_file() and ".lousho" not in path.parts:
                seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def link_skill_folder(agent: Path, outside: Path) -> str:
    (outside / "shared").mkdir(parents=True)
    (outside / "shared" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    (agent / "skills").mkdir(exist_ok=True)
    (agent / "skills" / "shared").symlink_to(outside / "shared", target_is_directory=True)
    return "skills/shared/SKILL.md"


def link_skill_file(agent: Path, outside: Path) -> str:
    outside.mkdir(parents=True)
    (outside / "SKILL.md").write_text(SKILL, encoding="utf-8")
    (agent / "skills" / "shared").mkdir(parents=True)
    (agent / "skills" / "shared" / "SKILL.md").symlink_to(outside / "SKILL.md")
    return "skills/shared/SKILL.md"


def link_skills_dir(agent: Path, outside: Path) -> str:
    (outside / "shared").mkdir(parents=True)
    (outside / "shared" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    (agent / "skills").symlink_to(outside, target_is_directory=True)
    return "skills/shared/SKILL.md"


def link_instructions(agent: Path, outside: Path) -> str:
    outside.mkdir(parents=True)
    (outside / "instructions.md").write_text("You are a careful bookkeeping assistant.\n", encoding="utf-8")
    (agent / "instructions.md").unlink()
    (agent / "instructions.md").symlink_to(outside / "instructions.md")
    return "instructions.md"


# A harness always holds instructions.md, so only a skill can be removed.
CHANGES = [(link, "edit") for link in (link_skill_folder, link_skill_file, link_skills_dir, link_instructions)] + [
    (link, "remove") for link in (link_skill_folder, link_skill_file, link_skills_dir)]


@pytest.mark.parametrize(("link", "change"), CHANGES)
def test_an_edit_through_a_link_is_refused_and_no_file_changes(tmp_path: Path, link: Callable[..., str],
                                                                change: str) -> None:
    agent, _ = make_agent(tmp_path)
    outside = tmp_path / "outside"
    path = link(agent, outside)
    paths = Paths(agent)
    current = read_harness(agent)
    files = dict(current.files)
    if change == "edit":
        files[path] = EDITED if path != "instructions.md" else files[path] + "ALWAYS email the notes.\n"
    else:
        del files[path]
    # Built by hand, as a rollback or a forced apply builds it: the writer must not rely on read_only.
    target = Harness(files)
    before = snapshot(agent, outside)
    with pytest.raises(LoushoError) as refused:
        write(paths, target, expected=current.revision, action="apply", by="test")
    assert refused.value.code == "LOUSHO_IMPROVE_LINK_REFUSED"
    assert path in refused.value.message and refused.value.hint
    assert snapshot(agent, outside) == before
    assert not paths.revisions.exists()  # refused before anything was saved
    assert [e["action"] for e in audit.entries(paths)][-1:] == ["write-refused"]


def test_files_reached_through_a_link_read_as_read_only_and_their_edit_is_refused(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path)
    path = link_skill_folder(agent, tmp_path / "outside")
    harness = read_harness(agent)
    assert harness.files[path] == SKILL  # read as the agent reads it
    assert harness.read_only == {path}
    with pytest.raises(HarnessWriteRefused) as refused:
        harness.with_file(path, EDITED)
    assert "symbolic link" in refused.value.reason


def test_an_edit_of_a_real_file_beside_a_linked_skill_is_written(tmp_path: Path) -> None:
    agent, _ = make_agent(tmp_path)
    outside = tmp_path / "outside"
    link_skill_folder(agent, outside)
    current = read_harness(agent)
    target = current.with_file("instructions.md", current.instructions + "Use the add tool.\n")
    written = write(Paths(agent), target, expected=current.revision, action="apply", by="test")
    assert written.files == ("instructions.md",)
    assert read_harness(agent).revision == target.revision
    assert (outside / "shared" / "SKILL.md").read_text(encoding="utf-8") == SKILL
