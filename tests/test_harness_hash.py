"""One harness revision from every door: the leaf (``lousho.kernel.harness_hash``), the improve loop's harness,
the agent loader's hash and the agent-side run span (observe's ``agent_run``, which may import no other part) agree,
and a directory the loop refuses has no revision on the agent side either."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from lousho.agent import directory as loader
from lousho.improve.harness import HarnessInvalid, read_harness
from lousho.improve.harness import harness_revision as improve_revision
from lousho.kernel import harness_hash
from lousho.kernel.harness_hash import HarnessUnreadable, harness_revision, revision_of
from lousho.observe.client.agent_run import agent_run

SKILL = "---\ndescription: how refunds work\n---\nRefund within 30 days.\r\n"


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    root = tmp_path / "desk"
    for name in ("refunds", "a-b", "a"):
        (root / "skills" / name).mkdir(parents=True)
        (root / "skills" / name / "SKILL.md").write_text(SKILL.replace("refunds", name), encoding="utf-8")
    (root / "skills" / "refunds" / "rates.csv").write_text("x,y\n")  # makes the skill read-only, same revision
    (root / "skills" / "notes.txt").write_text("not a skill folder\n")
    (root / "instructions.md").write_bytes("Answer in Français.\r\nBe brief.\n".encode())
    (root / "agent.py").write_text("# the agent's own code: not part of the harness\n")
    return root


def run_revision(root: Path) -> str | None:
    with agent_run("desk", harness=root, tracer_provider=TracerProvider()) as run:
        return run.revision


def test_the_leaf_keeps_the_loaders_rules() -> None:
    assert harness_hash.MAX_INSTRUCTIONS_CHARS == loader.MAX_INSTRUCTIONS_CHARS
    assert harness_hash.SKILL_NAME.pattern == loader.SKILL_NAME.pattern


def test_every_door_gives_the_same_revision(harness: Path) -> None:
    revision = harness_revision(harness)
    assert len(revision) == 16 and int(revision, 16) >= 0
    assert revision == improve_revision(harness) == read_harness(harness).revision == loader.harness_revision(harness)
    assert run_revision(harness) == revision
    # The hash of the text as read, byte for byte: no newline translation (the CR counts).
    files = read_harness(harness).files
    assert "\r\n" in files["instructions.md"] and revision_of(files) == revision
    (harness / "instructions.md").write_bytes(b"Answer in Fran\xc3\xa7ais.\nBe brief.\n")
    assert harness_revision(harness) != revision


@pytest.mark.parametrize(("change", "problem"), [
    (lambda d: (d / "instructions.md").unlink(), "missing"),
    (lambda d: (d / "instructions.md").write_text("  \n"), "empty"),
    (lambda d: (d / "instructions.md").write_text("x" * 8_001), "over the 8000 limit"),
    (lambda d: shutil.rmtree(d), "not a directory"),
    (lambda d: (d / "skills" / "Bad").mkdir(), "skill names"),
    (lambda d: (d / "skills" / "empty").mkdir(), "needs a SKILL.md"),
    (lambda d: (d / "skills" / "a" / "SKILL.md").write_bytes(b"\xff\xfe"), "not UTF-8"),
])
def test_a_directory_the_loop_refuses_has_no_revision_on_the_agent_side(
        harness: Path, change: Callable[[Path], object], problem: str) -> None:
    change(harness)
    with pytest.raises(HarnessUnreadable, match=problem) as leaf:
        harness_revision(harness)
    assert leaf.value.code == "LOUSHO_HARNESS_UNREADABLE" and leaf.value.hint
    with pytest.raises(HarnessInvalid) as improve:
        improve_revision(harness)
    assert improve.value.message == leaf.value.message and improve.value.code == "LOUSHO_IMPROVE_HARNESS_INVALID"
    assert run_revision(harness) is None
