"""The harness revision: a content hash of an agent directory's ``instructions.md`` and every
``skills/<name>/SKILL.md``, 16 hex chars.

A leaf (it imports nothing of ours but ``lousho.kernel.errors``): the improve loop computes the revision of the
harness it edits, and the agent side (``lousho.observe.agent_run``) tags each run with the revision of the
directory the agent read, so the two must come from one function, and observe may import no other part.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

from lousho.kernel.errors import UsageError

INSTRUCTIONS = "instructions.md"
SKILL_FILE = "SKILL.md"
# What makes a harness loadable, one definition for the agent's loader (lousho.agent.directory) and the hash:
# a directory the agent could not load has no revision.
# \Z, not $: `$` also matches before a final newline, so "notes\n" passed as a skill name.
SKILL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\Z")
MAX_INSTRUCTIONS_CHARS = 8_000


class HarnessUnreadable(UsageError):
    """A directory holds no harness: instructions.md missing, empty, too long or not UTF-8, or a bad skill folder."""

    code = "LOUSHO_HARNESS_UNREADABLE"
    hint = (f"a harness is a non-empty instructions.md of at most {MAX_INSTRUCTIONS_CHARS} characters "
            "plus skills/<name>/SKILL.md files with lowercase names")


def revision_of(files: Mapping[str, str]) -> str:
    """The revision of a harness given as posix relative path -> text: ``instructions.md`` first, then the
    skills sorted by path parts (the order a directory's skill folders sort in), each as path, NUL, UTF-8
    text, NUL. ``files`` must hold ``instructions.md``; paths other than harness files are hashed too."""
    digest = hashlib.sha256()
    skills = sorted((p for p in files if p != INSTRUCTIONS), key=lambda p: p.split("/"))
    for path in [INSTRUCTIONS, *skills]:
        digest.update(path.encode() + b"\0" + files[path].encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


def harness_files(root: Path) -> dict[str, str]:
    """The harness files of the directory ``root`` (path -> text); HarnessUnreadable says why there is none.

    A skill folder is any directory under ``skills/`` and must hold a SKILL.md; plain files there are ignored.
    """
    if not root.is_dir():
        raise HarnessUnreadable(f"{root}: not a directory")
    path = root / INSTRUCTIONS
    if not path.is_file():
        raise HarnessUnreadable(f"{path}: missing")
    instructions = _read(path)
    if not instructions.strip():
        raise HarnessUnreadable(f"{path}: empty")
    if len(instructions) > MAX_INSTRUCTIONS_CHARS:
        raise HarnessUnreadable(f"{path}: {len(instructions)} characters, over the {MAX_INSTRUCTIONS_CHARS} limit")
    files = {INSTRUCTIONS: instructions}
    skills = root / "skills"
    for entry in sorted(skills.iterdir()) if skills.is_dir() else []:
        if not entry.is_dir():
            continue
        if not SKILL_NAME.match(entry.name):
            raise HarnessUnreadable(f"{entry}: skill names are lowercase letters, digits, - and _")
        skill = entry / SKILL_FILE
        if not skill.is_file():
            raise HarnessUnreadable(f"{entry}: a skill folder needs a {SKILL_FILE}")
        files[f"skills/{entry.name}/{SKILL_FILE}"] = _read(skill)
    return files


def harness_revision(path: str | Path) -> str:
    """The revision of the harness directory at ``path``; HarnessUnreadable when it holds none."""
    return revision_of(harness_files(Path(path)))


def _read(path: Path) -> str:
    # Decode the bytes without newline translation, so the revision hashes exactly what is on disk.
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise HarnessUnreadable(f"{path}: not UTF-8 text: {e}") from None
