"""An apply and its rollback keep each harness file's permission bits: a file a person made private (0600)
stays private, and the rollback gives back the very bytes and modes the directory had."""

from __future__ import annotations

import stat
from pathlib import Path

from lousho.improve import audit
from lousho.improve.harness import read_harness
from lousho.improve.state import Paths
from lousho.improve.writer import write

SKILL = "---\ndescription: Old notes.\n---\nAdd with the add tool.\n"


def modes_and_bytes(agent: Path) -> dict[str, tuple[int, bytes]]:
    return {p.relative_to(agent).as_posix(): (stat.S_IMODE(p.stat().st_mode), p.read_bytes())
            for p in sorted(agent.rglob("*")) if p.is_file() and ".lousho" not in p.parts}


def test_an_apply_and_its_rollback_keep_the_files_permissions(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    (agent / "skills" / "alpha").mkdir(parents=True)
    (agent / "instructions.md").write_text("You keep the ledger.\n", encoding="utf-8")
    (agent / "skills" / "alpha" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    (agent / "instructions.md").chmod(0o600)
    (agent / "skills" / "alpha" / "SKILL.md").chmod(0o640)
    before = modes_and_bytes(agent)
    paths = Paths(agent)
    base = read_harness(agent)
    edited = base.with_file("instructions.md", "You keep the ledger. Check every sum twice.\n").with_file(
        "skills/alpha/SKILL.md", SKILL + "Subtract with the sub tool.\n")

    write(paths, edited, expected=base.revision, action="apply", by="test")
    after = modes_and_bytes(agent)
    assert {rel: mode for rel, (mode, _) in after.items()} == {rel: mode for rel, (mode, _) in before.items()}

    write(paths, base, expected=edited.revision, action="rollback", reason="test")
    assert modes_and_bytes(agent) == before
    assert audit.verify(paths).ok
