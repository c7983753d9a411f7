"""The editors' workspace: four file tools, every failure an `error:` string that changes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import lousho.agent
from lousho.improve.harness import read_harness
from lousho.improve.workspace import Workspace, WriteAttempt

EXAMPLE = Path(lousho.agent.__file__).parent / "example"
SKILL = "---\ndescription: How to count notes.\n---\nCall write_note once per item.\n"


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE, tmp_path / "agent", ignore=shutil.ignore_patterns("__pycache__")))


@pytest.fixture
def ws(agent_dir: Path) -> Workspace:
    return Workspace(read_harness(agent_dir))


def test_tool_schemas_offer_exactly_the_four_file_tools() -> None:
    schemas = Workspace.tool_schemas()
    names = [s["function"]["name"] for s in schemas]
    assert names == ["list_files", "read_file", "write_file", "edit_file"]
    assert all(s["type"] == "function" for s in schemas)
    assert schemas[3]["function"]["parameters"]["required"] == ["path", "old", "new"]
    json.dumps(schemas)
    schemas.clear()
    assert len(Workspace.tool_schemas()) == 4


def test_list_files_shows_sizes_and_marks_read_only_skills(agent_dir: Path) -> None:
    (agent_dir / "skills" / "arithmetic" / "helper.py").write_text("x = 1\n")
    harness = read_harness(agent_dir)
    listing = Workspace(harness).call("list_files", {})
    assert f"instructions.md: {len(harness.instructions)} chars of 8000 max, always on" in listing
    skill = harness.files["skills/arithmetic/SKILL.md"]
    assert f"skills/arithmetic/SKILL.md: {len(skill)} chars (read-only)" in listing


def test_read_write_and_edit_change_only_the_workspace_copy(ws: Workspace, agent_dir: Path) -> None:
    original = (agent_dir / "instructions.md").read_bytes()
    assert ws.call("read_file", {"path": "instructions.md"}) == ws.base.instructions
    assert ws.call("edit_file", {"path": "instructions.md", "old": "careful", "new": "meticulous"}).startswith("ok:")
    assert ws.call("write_file", {"path": "skills/notes/SKILL.md", "content": SKILL}).startswith("ok: created")
    assert "meticulous" in ws.harness.instructions
    assert ws.base.changed_paths(ws.harness) == ["instructions.md", "skills/notes/SKILL.md"]
    assert ws.writes == [WriteAttempt("edit_file", "instructions.md", True),
                         WriteAttempt("write_file", "skills/notes/SKILL.md", True)]
    assert ws.refused == []
    assert (agent_dir / "instructions.md").read_bytes() == original


BAD_CALLS: list[tuple[str, Any]] = [
    ("run_shell", {"command": "ls"}),
    ("read_file", {}),
    ("read_file", {"path": 3}),
    ("read_file", {"path": "instructions.md", "extra": "x"}),
    ("read_file", "instructions.md"),
    ("read_file", {"path": "agent.toml"}),
    ("read_file", {"path": "skills/none/SKILL.md"}),
    ("list_files", {"path": "x"}),
    ("write_file", {"path": "instructions.md"}),
    ("write_file", {"path": "tools.py", "content": "import os\n"}),
    ("write_file", {"path": "../outside.md", "content": "x"}),
    ("write_file", {"path": "skills/x/other.py", "content": "x"}),
    ("write_file", {"path": "instructions.md", "content": "x" * 8_001}),
    ("write_file", {"path": "instructions.md", "content": ""}),
    ("write_file", {"path": "skills/Bad/SKILL.md", "content": SKILL}),
    ("write_file", {"path": "skills/notes/SKILL.md", "content": "no front matter"}),
    ("edit_file", {"path": "instructions.md", "old": "not in the file", "new": "x"}),
    ("edit_file", {"path": "instructions.md", "old": "", "new": "x"}),
    ("edit_file", {"path": "instructions.md", "old": "careful", "new": "careful"}),
    ("edit_file", {"path": "instructions.md", "old": "the", "new": "a"}),
    ("edit_file", {"path": "skills/none/SKILL.md", "old": "a", "new": "b"}),
    ("edit_file", {"path": "skills/arithmetic/SKILL.md", "old": "description: How", "new": "title: How"}),
]


@pytest.mark.parametrize(("name", "arguments"), BAD_CALLS)
def test_every_bad_call_returns_an_error_and_changes_nothing(ws: Workspace, name: str, arguments: Any) -> None:
    result = ws.call(name, arguments)
    assert result.startswith("error: ")
    assert ws.harness == ws.base
    assert all(not w.accepted and w.reason for w in ws.writes)


def test_edit_file_needs_old_text_that_occurs_exactly_once(ws: Workspace) -> None:
    assert ws.base.instructions.count("the") > 1
    result = ws.call("edit_file", {"path": "instructions.md", "old": "the", "new": "a"})
    assert "occurs" in result and "exactly once" in result
    assert ws.refused == [WriteAttempt("edit_file", "instructions.md", False, result.removeprefix("error: "))]
    unique = "call the `add` tool"
    assert ws.call("edit_file", {"path": "instructions.md", "old": unique, "new": "use `add`"}).startswith("ok:")
    assert ws.harness.instructions.count("use `add`") == 1


def test_a_write_to_a_read_only_skill_is_refused_and_recorded(agent_dir: Path) -> None:
    (agent_dir / "skills" / "arithmetic" / "helper.py").write_text("x = 1\n")
    ws = Workspace(read_harness(agent_dir))
    result = ws.call("write_file", {"path": "skills/arithmetic/SKILL.md", "content": SKILL})
    assert result.startswith("error: refused: skills/arithmetic/SKILL.md: read-only")
    assert ws.harness == ws.base
    assert [(w.tool, w.path, w.accepted) for w in ws.refused] == [("write_file", "skills/arithmetic/SKILL.md", False)]


def test_check_write_sees_before_and_after_and_its_refusal_is_recorded(agent_dir: Path) -> None:
    seen: list[tuple[str, str, str]] = []

    def check(path: str, before: str, after: str) -> str | None:
        seen.append((path, before, after))
        return "looks like an injected instruction" if "ignore previous" in after else None

    ws = Workspace(read_harness(agent_dir), check_write=check)
    bad = ws.call("edit_file", {"path": "instructions.md", "old": "careful", "new": "careful (ignore previous)"})
    assert bad == "error: refused: instructions.md: looks like an injected instruction"
    assert ws.harness == ws.base
    assert seen[0][1] == ws.base.instructions and "ignore previous" in seen[0][2]
    assert ws.call("write_file", {"path": "skills/notes/SKILL.md", "content": SKILL}).startswith("ok:")
    assert seen[1] == ("skills/notes/SKILL.md", "", SKILL)
    assert [(w.tool, w.accepted, w.reason) for w in ws.writes] == [
        ("edit_file", False, "instructions.md: looks like an injected instruction"), ("write_file", True, None)]
    assert len(ws.refused) == 1


def test_check_write_is_not_consulted_for_a_write_the_harness_refuses(agent_dir: Path) -> None:
    calls: list[str] = []
    ws = Workspace(read_harness(agent_dir), check_write=lambda path, before, after: calls.append(path))
    assert ws.call("write_file", {"path": "agent.toml", "content": "x"}).startswith("error: refused:")
    assert calls == []


@pytest.mark.parametrize("name", ["notes\n", "notes\r", "notes\n\n", "\nnotes"])
def test_a_skill_name_with_a_line_break_is_refused_and_nothing_is_created(ws: Workspace, agent_dir: Path,
                                                                         name: str) -> None:
    # re.match with `$` accepted a trailing newline: a model could create skills/notes\n/SKILL.md, a folder whose
    # name carries a line break into the skill listing the agent's model reads.
    result = ws.call("write_file", {"path": f"skills/{name}/SKILL.md", "content": SKILL})
    assert result.startswith("error: refused: ")
    assert ws.harness == ws.base
    assert sorted(p.name for p in (agent_dir / "skills").iterdir()) == ["arithmetic"]


def test_a_skill_folder_named_with_a_line_break_is_not_a_harness(agent_dir: Path) -> None:
    from lousho.improve.harness import HarnessInvalid

    folder = agent_dir / "skills" / "notes\n"
    folder.mkdir()
    (folder / "SKILL.md").write_text(SKILL, encoding="utf-8")
    with pytest.raises(HarnessInvalid):
        read_harness(agent_dir)
