"""The harness: what is writable, its revision, diffs, and materializing a candidate beside the real directory."""

from __future__ import annotations

import hashlib
import pickle
import shutil
from pathlib import Path

import pytest

import lousho.agent
from lousho.agent.directory import MAX_INSTRUCTIONS_CHARS, harness_revision, load
from lousho.improve.harness import (
    Harness,
    HarnessInvalid,
    HarnessWriteRefused,
    diff,
    materialize,
    read_harness,
)

EXAMPLE = Path(lousho.agent.__file__).parent / "example"
SKILL = "---\ndescription: How to count notes.\n---\nCall write_note once per item.\n"


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE, tmp_path / "agent", ignore=shutil.ignore_patterns("__pycache__")))


def tree_hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_read_harness_holds_only_instructions_and_skills(agent_dir: Path) -> None:
    harness = read_harness(agent_dir)
    assert sorted(harness.files) == ["instructions.md", "skills/arithmetic/SKILL.md"]
    assert harness.instructions == (agent_dir / "instructions.md").read_text()
    assert harness.skill_names == ["arithmetic"]
    assert harness.always_on_chars == len(harness.instructions)
    assert harness.read_only == frozenset()


def test_revision_equals_harness_revision_on_disk_before_and_after_a_materialized_change(
        agent_dir: Path, tmp_path: Path) -> None:
    harness = read_harness(agent_dir)
    assert harness.revision == harness_revision(agent_dir)
    changed = (harness.with_file("instructions.md", harness.instructions + "Be brief. Ünïcode too.\n")
               .with_file("skills/notes/SKILL.md", SKILL).with_file("skills/a-b/SKILL.md", SKILL))
    assert changed.revision != harness.revision
    copy = materialize(changed, agent_dir, tmp_path / "candidate")
    assert changed.revision == harness_revision(copy)
    assert read_harness(copy) == changed


def test_harness_is_immutable_hashable_and_compares_by_content(agent_dir: Path) -> None:
    a, b = read_harness(agent_dir), read_harness(agent_dir)
    assert a == b and hash(a) == hash(b)
    assert a.with_file("instructions.md", "other\n") != a
    with pytest.raises(TypeError):
        a.files["instructions.md"] = "x"  # type: ignore[index]


def test_constructing_a_harness_with_a_path_outside_it_is_invalid() -> None:
    with pytest.raises(HarnessInvalid) as e:
        Harness({"instructions.md": "hi", "agent.toml": "name = 'x'"})
    assert e.value.code == "LOUSHO_IMPROVE_HARNESS_INVALID" and e.value.hint
    with pytest.raises(HarnessInvalid):
        Harness({"skills/x/SKILL.md": SKILL})


def test_a_skill_folder_holding_another_file_is_read_only_and_its_write_refused(agent_dir: Path) -> None:
    (agent_dir / "skills" / "arithmetic" / "helper.py").write_text("def helper(): ...\n")
    harness = read_harness(agent_dir)
    path = "skills/arithmetic/SKILL.md"
    assert harness.read_only == {path}
    assert not harness.writable(path) and harness.writable("instructions.md")
    with pytest.raises(HarnessWriteRefused) as e:
        harness.with_file(path, SKILL)
    assert e.value.code == "LOUSHO_IMPROVE_WRITE_REFUSED" and "read-only" in e.value.reason
    assert e.value.path == path


@pytest.mark.parametrize("path", [
    "agent.toml", "tools.py", "skills/arithmetic/helper.py", "skills/x/other.py", "../instructions.md",
    "/instructions.md", "skills/../instructions.md", "skills\\x\\SKILL.md", "./instructions.md",
    "skills/x/sub/SKILL.md", "skills/SKILL.md", "", "skills/Bad/SKILL.md", "skills/-x/SKILL.md",
    "skills/a b/SKILL.md", f"skills/{'a' * 65}/SKILL.md", "workspace/instructions.md",
])
def test_every_path_outside_the_harness_is_refused(agent_dir: Path, path: str) -> None:
    harness = read_harness(agent_dir)
    assert not harness.writable(path)
    with pytest.raises(HarnessWriteRefused) as e:
        harness.with_file(path, SKILL)
    assert e.value.reason


@pytest.mark.parametrize(("text", "why"), [
    ("Just text, no front matter.\n", "front matter"),
    ("---\ndescription: never closed\n", "not closed"),
    ("---\nname: x\n---\nbody\n", "description"),
    ("---\ndescription:   \n---\nbody\n", "description"),
    ("---\nname: other\ndescription: d\n---\nbody\n", "must match"),
])
def test_a_skill_without_a_described_front_matter_is_refused(agent_dir: Path, text: str, why: str) -> None:
    with pytest.raises(HarnessWriteRefused) as e:
        read_harness(agent_dir).with_file("skills/new/SKILL.md", text)
    assert why in e.value.reason


def test_instructions_may_hold_8000_characters_but_not_8001_nor_nothing(agent_dir: Path) -> None:
    harness = read_harness(agent_dir)
    assert MAX_INSTRUCTIONS_CHARS == 8_000
    assert harness.with_file("instructions.md", "x" * 8_000).always_on_chars == 8_000
    with pytest.raises(HarnessWriteRefused, match="8001 characters, over the 8000 limit"):
        harness.with_file("instructions.md", "x" * 8_001)
    with pytest.raises(HarnessWriteRefused, match="empty"):
        harness.with_file("instructions.md", " \n")


@pytest.mark.parametrize(("change", "problem"), [
    (lambda d: (d / "instructions.md").unlink(), "missing"),
    (lambda d: (d / "instructions.md").write_text("  \n"), "empty"),
    (lambda d: (d / "instructions.md").write_text("x" * 8_001), "over the 8000 limit"),
    (lambda d: shutil.rmtree(d), "not a directory"),
    (lambda d: (d / "skills" / "Bad").mkdir(), "skill names"),
    (lambda d: (d / "skills" / "empty").mkdir(), "needs a SKILL.md"),
    (lambda d: (d / "instructions.md").write_bytes(b"\xff\xfe"), "not UTF-8"),
])
def test_read_harness_refuses_a_directory_without_a_usable_harness(agent_dir: Path, change, problem: str) -> None:
    change(agent_dir)
    with pytest.raises(HarnessInvalid, match=problem):
        read_harness(agent_dir)


def test_write_refused_keeps_its_fields_through_pickling() -> None:
    err = pickle.loads(pickle.dumps(HarnessWriteRefused("tools.py", "not part of the harness")))
    assert (err.path, err.reason, err.code) == ("tools.py", "not part of the harness", "LOUSHO_IMPROVE_WRITE_REFUSED")


def test_diff_shows_a_changed_file_and_a_new_skill_in_path_order(agent_dir: Path) -> None:
    base = read_harness(agent_dir)
    other = (base.with_file("skills/notes/SKILL.md", SKILL)
             .with_file("instructions.md", base.instructions.replace("careful", "meticulous")))
    assert base.changed_paths(other) == ["instructions.md", "skills/notes/SKILL.md"]
    text = diff(base, other)
    assert text == diff(base, other)
    assert text.startswith("--- a/instructions.md\n+++ b/instructions.md\n@@ ")
    assert "-You are a careful bookkeeping assistant.\n+You are a meticulous bookkeeping assistant.\n" in text
    assert ("--- /dev/null\n+++ b/skills/notes/SKILL.md\n@@ -0,0 +1,4 @@\n+---\n+description: How to count notes.\n"
            in text)
    removed = diff(other, base)
    assert "--- a/skills/notes/SKILL.md\n+++ /dev/null\n" in removed


def test_diff_of_equal_harnesses_is_empty_and_marks_a_missing_final_newline(agent_dir: Path) -> None:
    base = read_harness(agent_dir)
    assert diff(base, base) == "" and base.changed_paths(base) == []
    text = diff(base, base.with_file("instructions.md", "one line"))
    assert text.endswith("+one line\n\\ No newline at end of file\n")


def test_materialize_leaves_the_source_untouched_and_the_copy_loads(agent_dir: Path, tmp_path: Path) -> None:
    (agent_dir / ".lousho").mkdir()
    (agent_dir / ".lousho" / "state.db").write_bytes(b"state")
    (agent_dir / "workspace").mkdir()
    (agent_dir / "workspace" / "notes.txt").write_text("scratch")
    (agent_dir / "skills" / "old").mkdir()
    (agent_dir / "skills" / "old" / "SKILL.md").write_text(SKILL)
    before = tree_hashes(agent_dir)
    base = read_harness(agent_dir)
    changed = Harness({k: v for k, v in base.files.items() if k != "skills/old/SKILL.md"}, base.read_only)
    changed = changed.with_file("instructions.md", "You are terse.\n").with_file("skills/notes/SKILL.md", SKILL)

    copy = materialize(changed, agent_dir, tmp_path / "candidate")

    assert tree_hashes(agent_dir) == before
    assert not (copy / ".lousho").exists() and not (copy / "workspace").exists()
    assert not (copy / "skills" / "old").exists()
    assert (copy / "tools.py").read_bytes() == (agent_dir / "tools.py").read_bytes()
    loaded = load(copy)
    assert loaded.instructions == "You are terse.\n"
    assert [s.name for s in loaded.skills] == ["arithmetic", "notes"]
    assert loaded.revision == changed.revision


def test_materialize_refuses_to_change_or_drop_a_read_only_skill(agent_dir: Path, tmp_path: Path) -> None:
    (agent_dir / "skills" / "arithmetic" / "helper.py").write_text("def helper(): ...\n")
    base = read_harness(agent_dir)
    forged = Harness({**base.files, "skills/arithmetic/SKILL.md": SKILL})
    with pytest.raises(HarnessWriteRefused, match="read-only"):
        materialize(forged, agent_dir, tmp_path / "a")
    with pytest.raises(HarnessWriteRefused, match="read-only"):
        materialize(Harness({"instructions.md": base.instructions}), agent_dir, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    copy = materialize(base, agent_dir, tmp_path / "c")
    assert (copy / "skills" / "arithmetic" / "helper.py").is_file()


def test_materialize_refuses_a_target_that_overlaps_the_source_or_is_not_empty(
        agent_dir: Path, tmp_path: Path) -> None:
    harness = read_harness(agent_dir)
    for target in (agent_dir, tmp_path, agent_dir / "skills" / "copy"):
        with pytest.raises(HarnessInvalid):
            materialize(harness, agent_dir, target)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(HarnessInvalid, match="not an empty directory"):
        materialize(harness, agent_dir, tmp_path / "full")
    inside = materialize(harness, agent_dir, agent_dir / ".lousho" / "probe")
    assert load(inside).revision == harness.revision
