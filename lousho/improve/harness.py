"""The harness: the part of an agent directory the improve loop may edit, as immutable data.

A harness directory is any directory holding ``instructions.md`` and, optionally,
``skills/<name>/SKILL.md`` files (the seeds' scope): the agent that reads them may be built on any
framework. ``agent.toml`` and ``tools.py`` make it lousho's reference agent, which the loop can also
run itself; for any other agent the check module's ``probe()`` runs it.

The harness is ``instructions.md`` plus every ``skills/<name>/SKILL.md``; nothing else of the
directory is writable (agent.toml, tools.py and hooks are code or configuration a person owns). A
skill folder that holds anything besides its SKILL.md ships scripts or data its text describes, so
its SKILL.md is read-only too, and so is a harness file reached through a symbolic link (the file,
its skill folder or ``skills/`` being a link): it is read as the agent reads it, but never written,
since a write through it could land outside the agent directory. The always-on instructions stay
within ``MAX_INSTRUCTIONS_CHARS``, the limit the loader enforces. A harness's revision is the same content hash
``lousho.agent.directory.harness_revision`` computes on disk, so runs of a materialized candidate are
recorded under the candidate's revision.
"""

from __future__ import annotations

import difflib
import shutil
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.agent.directory import MAX_INSTRUCTIONS_CHARS
from lousho.kernel.errors import LoushoError, UsageError
from lousho.kernel.harness_hash import INSTRUCTIONS, SKILL_FILE, HarnessUnreadable, harness_files, revision_of
from lousho.kernel.harness_hash import SKILL_NAME as _SKILL_NAME

# Copied into a materialized directory never: run state, bytecode and the agent's scratch space.
_SKIPPED_TOP = frozenset({".lousho", "workspace"})
_SKIPPED_ANYWHERE = frozenset({"__pycache__"})


class HarnessInvalid(UsageError):
    """An agent directory (or a Harness built by hand) does not hold a usable harness."""

    code = "LOUSHO_IMPROVE_HARNESS_INVALID"
    hint = (f"the harness is a non-empty instructions.md of at most {MAX_INSTRUCTIONS_CHARS} characters "
            "plus skills/<name>/SKILL.md files with lowercase names")


class HarnessWriteRefused(LoushoError):
    """A write outside the editable harness, or one that would leave it unloadable."""

    code = "LOUSHO_IMPROVE_WRITE_REFUSED"
    hint = ("only instructions.md and skills/<name>/SKILL.md are writable; a SKILL.md starts with front "
            "matter holding `description: ...`, and a skill folder with other files is read-only")

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason))


class _Files(Mapping[str, str]):
    """A read-only, hashable path -> text mapping, iterated in sorted path order."""

    __slots__ = ("_data",)

    def __init__(self, files: Mapping[str, str]) -> None:
        self._data = dict(sorted(files.items()))

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))

    def __repr__(self) -> str:
        return repr(self._data)


@dataclass(frozen=True)
class Harness:
    """The editable files of an agent directory (posix relative path -> text) and which are read-only.

    Invariants, checked on construction: every path is ``instructions.md`` or
    ``skills/<name>/SKILL.md`` with a valid name, ``instructions.md`` is present, and every read-only
    path is one of the files. Text limits are checked where text enters: ``read_harness`` and
    ``with_file``.
    """

    files: Mapping[str, str]
    read_only: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", _Files(self.files))
        object.__setattr__(self, "read_only", frozenset(self.read_only))
        for path, text in self.files.items():
            reason = _path_problem(path)
            if reason or not isinstance(text, str):
                raise HarnessInvalid(f"{path!r}: {reason or 'text must be a str'}")
        if INSTRUCTIONS not in self.files:
            raise HarnessInvalid(f"a harness needs {INSTRUCTIONS}")
        unknown = sorted(self.read_only - set(self.files))
        if unknown:
            raise HarnessInvalid(f"read-only paths that are not harness files: {unknown}")

    @property
    def revision(self) -> str:
        """16 hex chars; equal to ``harness_revision`` of a directory holding these files' UTF-8 bytes."""
        return revision_of(self.files)

    @property
    def instructions(self) -> str:
        return self.files[INSTRUCTIONS]

    @property
    def skill_names(self) -> list[str]:
        return [p.split("/")[1] for p in self._skill_paths()]

    @property
    def always_on_chars(self) -> int:
        return len(self.instructions)

    def writable(self, path: str) -> bool:
        return _path_problem(path) is None and path not in self.read_only

    def with_file(self, path: str, text: str) -> Harness:
        """A copy with ``path`` set to ``text``; HarnessWriteRefused says why when the write is not allowed."""
        reason = _path_problem(path)
        if reason is None and path in self.read_only:
            reason = ("read-only: its skill folder holds other files that this SKILL.md describes, or it is "
                      "reached through a symbolic link")
        if reason is None:
            reason = _text_problem(path, text)
        if reason is not None:
            raise HarnessWriteRefused(path, reason)
        return Harness({**self.files, path: text}, self.read_only)

    def changed_paths(self, other: Harness) -> list[str]:
        """Sorted paths whose text differs, or that only one of the two harnesses holds."""
        paths = set(self.files) | set(other.files)
        return sorted(p for p in paths if self.files.get(p) != other.files.get(p))

    def _skill_paths(self) -> list[str]:
        return [p for p in self.files if p != INSTRUCTIONS]


def _path_problem(path: object) -> str | None:
    """Why ``path`` is not a harness path, or None when it is one."""
    if not isinstance(path, str) or not path:
        return "a path is a non-empty string"
    if path == INSTRUCTIONS:
        return None
    if "\\" in path or path.startswith("/") or ".." in path.split("/"):
        return "paths are relative, use /, and stay inside the agent directory"
    parts = path.split("/")
    if len(parts) == 3 and parts[0] == "skills" and parts[2] == SKILL_FILE:
        if not _SKILL_NAME.match(parts[1]):
            return "skill names are 1-64 lowercase letters, digits, - and _, starting with a letter or digit"
        return None
    if len(parts) >= 2 and parts[0] == "skills":
        return "only a skill's SKILL.md is writable, not other files of its folder"
    return "not part of the harness: only instructions.md and skills/<name>/SKILL.md are writable"


def _text_problem(path: str, text: object) -> str | None:
    if not isinstance(text, str):
        return "the content must be text"
    if path == INSTRUCTIONS:
        if not text.strip():
            return "the instructions cannot be empty"
        if len(text) > MAX_INSTRUCTIONS_CHARS:
            return (f"{len(text)} characters, over the {MAX_INSTRUCTIONS_CHARS} limit for always-on instructions; "
                    "move detail into a skill, which loads only when the model asks for it")
        return None
    return _skill_problem(path.split("/")[1], text)


def _skill_problem(name: str, text: str) -> str | None:
    """The loader's front matter rules (lousho.agent.directory._front_matter), checked on text."""
    if not text.startswith("---"):
        return "a SKILL.md starts with front matter: ---, a line `description: ...`, ---"
    end = text.find("\n---", 3)
    if end < 0:
        return "the front matter is not closed with ---"
    meta = {}
    for line in text[3:end].strip().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip().strip('"').strip("'")
    if not meta.get("description", "").strip():
        return "the front matter needs a non-empty `description: ...` line"
    # The loader names a skill by its front matter; a different name would shadow the folder's.
    if "name" in meta and meta["name"] != name:
        return f"the front matter name {meta['name']!r} must match the folder name {name!r}"
    return None


def read_harness(agent_dir: Path) -> Harness:
    """Read the harness of an agent directory from disk, marking skills whose folder holds other files."""
    root = Path(agent_dir)
    try:
        files = harness_files(root)
    except HarnessUnreadable as e:
        raise HarnessInvalid(e.message) from None
    read_only = {key for key in files if key != INSTRUCTIONS and any(
        e.name not in _SKIPPED_ANYWHERE and e.name != SKILL_FILE for e in (root / key).parent.iterdir())}
    read_only.update(key for key in files if linked_part(root, key) is not None)
    return Harness(files, frozenset(read_only))


def harness_revision(path: str | Path) -> str:
    """The revision the loop uses for the harness directory at ``path``: 16 hex chars of a content
    hash of instructions.md and every skills/<name>/SKILL.md. Tag an agent's runs with it
    (``lousho.harness.revision`` on the root span) so the loop can tell revisions apart.

    Raises HarnessInvalid when ``path`` is not a harness directory.
    """
    return read_harness(Path(path)).revision


def is_reference_agent(root: Path) -> bool:
    """Does ``root`` hold lousho's reference agent (an agent.toml), which the loop can run without probe()?"""
    return (Path(root) / "agent.toml").is_file()


def agent_name(root: Path) -> str:
    """The agent name runs are recorded under: agent.toml's ``name`` for the reference agent (the
    loader's rule, without executing tools.py), else the directory's name."""
    try:
        config = tomllib.loads((Path(root) / "agent.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        config = {}
    return str(config.get("name", Path(root).resolve().name))


def linked_part(root: Path, path: str) -> str | None:
    """The first part of ``root/path`` below ``root`` that is a symbolic link (``skills``,
    ``skills/<name>`` or the file itself), as a relative posix path; None when there is none."""
    here = Path(root)
    for part in path.split("/"):
        here = here / part
        if here.is_symlink():
            return here.relative_to(root).as_posix()
    return None


def diff(base: Harness, other: Harness) -> str:
    """A unified diff from ``base`` to ``other`` over every changed file, in path order; "" when equal."""
    out: list[str] = []
    for path in base.changed_paths(other):
        before, after = base.files.get(path), other.files.get(path)
        lines = difflib.unified_diff(
            (before or "").splitlines(keepends=True), (after or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if before is not None else "/dev/null",
            tofile=f"b/{path}" if after is not None else "/dev/null")
        # difflib leaves a last line without its newline glued to the next; mark it the way git does.
        out.extend(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return "".join(out)


def materialize(harness: Harness, agent_dir: Path, into: Path) -> Path:
    """Make ``into`` a copy of ``agent_dir`` running ``harness``; the source directory is never written.

    Everything but ``.lousho/``, ``workspace/`` and ``__pycache__/`` is copied (symlinks become real
    files, so no write can reach through one into the source), then the harness files are written
    over the copy and SKILL.md files the harness no longer has are removed. ``into`` must be missing
    or empty. A harness that changes or drops a read-only skill of ``agent_dir`` is refused before
    anything is written.
    """
    source_root, target = Path(agent_dir).resolve(), Path(into).resolve()
    source = read_harness(source_root)
    _check_target(source_root, target)
    for path in sorted(source.read_only):
        if harness.files.get(path) != source.files[path]:
            raise HarnessWriteRefused(path, "read-only: its skill folder holds other files; it cannot change")
    shutil.copytree(source_root, target, ignore=_ignore(source_root), dirs_exist_ok=True)
    for path in source.files.keys() - harness.files.keys():
        (target / path).unlink()
        if not any((target / path).parent.iterdir()):
            (target / path).parent.rmdir()
    for path, text in harness.files.items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_bytes(text.encode("utf-8"))
    return Path(into)


def _check_target(source: Path, target: Path) -> None:
    if target == source or target in source.parents:
        raise HarnessInvalid(f"{target}: cannot materialize into the agent directory or one holding it")
    # Inside the source only under a directory the copy skips, or the copy would copy itself.
    if source in target.parents and target.relative_to(source).parts[0] not in _SKIPPED_TOP:
        raise HarnessInvalid(f"{target}: inside the agent directory; use a path outside it or under .lousho/")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise HarnessInvalid(f"{target}: exists and is not an empty directory")


def _ignore(source: Path) -> Callable[[str, list[str]], set[str]]:
    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = set(_SKIPPED_ANYWHERE)
        if Path(folder) == source:
            skipped |= _SKIPPED_TOP
        return skipped & set(names)

    return ignore
