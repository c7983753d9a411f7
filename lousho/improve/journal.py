"""The writer's journal: an apply is begun in the audit log before the first harness file changes and closed
after the last, so an apply cut short (SIGKILL, OOM, power loss) is found and undone on the next start.

The harness files sit in the user's agent directory among files the loop does not own (agent.toml, tools,
data), so the directory cannot be swapped in one rename. Instead:

1. both revisions are saved under ``.lousho/revisions/`` (fsynced);
2. an ``apply-begin`` line names the action, the revisions before and after, and every file it will change
   with the SHA-256 of its old and new text (null for a file that is absent on that side);
3. each file is staged beside its target (``.<name>.lousho-<pid>.tmp``, fsynced) and renamed in;
4. the action's own line (``apply``, ``rollback``) closes the begin: it carries ``begun`` = the begin's seq.

That closing line is the commit point. A begin without one is an apply that never finished: ``recover``
(run by every improve command, the watcher's ticks, ``status`` and ``audit --verify``, and the writer
itself) puts the files named in it back to their old text from the saved revision, removes the staged
files, and closes the begin with an ``apply-undone`` line, so the harness is again exactly the revision it
was. A file that holds neither its old nor its new text was changed by someone after the crash: it is left
as found and the begin is closed with ``apply-abandoned``. When the old revision's saved copy is gone, a
harness already holding every new file is closed as ``apply-completed``; anything else stays open
(``apply-unrecoverable`` is reported, never written) and the writer refuses to write over it.

Recovery is itself a write through the same staging and renames; cut short, it runs again from the start.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.improve import audit, faults
from lousho.improve.errors import RevisionMissing
from lousho.improve.harness import Harness
from lousho.improve.locks import exclusive
from lousho.improve.revisions import load_revision
from lousho.improve.state import Paths
from lousho.kernel.errors import LoushoError

BEGIN = "apply-begin"
UNDONE, COMPLETED, ABANDONED = "apply-undone", "apply-completed", "apply-abandoned"
STRAYS_REMOVED = "stray-files-removed"
_HARNESS_TMP = re.compile(r"^\..+\.lousho-\d+\.tmp$")
_LOOP_TMP = re.compile(r"^\..+\.(\d+)\.\d+\.tmp$")  # state.write_json's temp files: .<name>.<pid>.<thread>.tmp


class ApplyUnrecoverable(LoushoError):
    code = "LOUSHO_IMPROVE_APPLY_UNRECOVERABLE"
    hint = ("an apply was cut short and the saved revisions needed to undo it are gone; restore the harness "
            "files by hand (`lousho improve audit DIR` shows the begun apply), then run `lousho improve rollback "
            "DIR --to REV` or restore .lousho/revisions/")


@dataclass(frozen=True)
class Recovery:
    """What ``recover`` did: ``outcome`` is the closing line's action (``apply-undone``, ``apply-completed``,
    ``apply-abandoned``), ``stray-files-removed`` when only staged files were left, or ``apply-unrecoverable``
    (nothing written; the begin stays open). ``revision`` is the harness's revision afterwards when known."""

    outcome: str
    begun: int | None
    revision: str | None
    files: tuple[str, ...]
    removed: tuple[str, ...]
    reason: str

    def describe(self) -> str:
        where = f" (audit line {self.begun})" if self.begun is not None else ""
        return f"{self.outcome}{where}: {self.reason}"


def text_hash(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def begin(paths: Paths, action: str, current: Harness, target: Harness, changed: list[str],
          **fields: Any) -> int:
    """Append the ``apply-begin`` line for a write of ``changed`` from ``current`` to ``target``; its seq."""
    files = {rel: {"old": text_hash(current.files.get(rel)), "new": text_hash(target.files.get(rel))}
             for rel in changed}
    entry = audit.append(paths, BEGIN, intent=action, before=current.revision, after=target.revision, files=files,
                         **fields)
    return int(entry["seq"])


def open_begin(paths: Paths) -> dict[str, Any] | None:
    """The last ``apply-begin`` line no later line closes (names it in ``begun``), or None."""
    last: dict[str, Any] | None = None
    closed: set[int] = set()
    for _, entry in audit.numbered_entries(paths):
        if entry is None:
            continue
        if entry.get("action") == BEGIN:
            last = entry
        if isinstance(entry.get("begun"), int):
            closed.add(entry["begun"])
    return last if last is not None and last.get("seq") not in closed else None


def recover(paths: Paths) -> Recovery | None:
    """Undo an apply that was cut short and remove staged files left behind; None when there was nothing.
    Waits for a writer at work (the write lock): its begin is open only because it is still writing."""
    if open_begin(paths) is None and not _strays(paths):
        return None
    with exclusive(paths, "write"):
        return recover_locked(paths)


_CUT_SHORT = "an apply was cut short (the process died mid-write)"


def recover_locked(paths: Paths, reason: str = _CUT_SHORT) -> Recovery | None:
    """``recover`` for a caller that holds the write lock (the writer, before it reads the harness)."""
    entry = open_begin(paths)
    removed = _remove_strays(paths)
    if entry is None:
        if not removed:
            return None
        audit.append(paths, STRAYS_REMOVED, files=removed, reason="staged files of a write that never finished")
        return Recovery(STRAYS_REMOVED, None, None, (), tuple(removed), "staged files of a write that never finished")
    return _close(paths, entry, removed, reason)


def _close(paths: Paths, entry: dict[str, Any], removed: list[str], reason: str) -> Recovery:
    seq = int(entry["seq"])
    files: dict[str, dict[str, str | None]] = entry.get("files") or {}
    before, after = str(entry.get("before")), str(entry.get("after"))
    on_disk = {rel: _read(paths.agent_dir / rel) for rel in files}
    foreign = sorted(rel for rel, text in on_disk.items()
                     if text_hash(text) not in (files[rel].get("old"), files[rel].get("new")))
    if foreign:
        why = f"{reason}; {', '.join(foreign)} changed since by someone else: left as found, nothing undone"
        audit.append(paths, ABANDONED, begun=seq, before=before, after=after, files=foreign, removed=removed,
                     reason=why)
        return Recovery(ABANDONED, seq, None, tuple(foreign), tuple(removed), why)
    for outcome, revision, side in ((UNDONE, before, "old"), (COMPLETED, after, "new")):
        texts = _texts(paths, revision, files, side)
        if texts is None:
            continue
        changes = {rel: text for rel, text in texts.items() if on_disk[rel] != text}
        write_files(paths.agent_dir, changes, prefix="recover:")
        _remove_empty_skill_folders(paths, [rel for rel, text in texts.items() if text is None])
        why = (f"{reason}; the harness is back at {before}" if outcome == UNDONE
               else f"{reason}; the saved copy of {before} is gone, so the apply was finished at {after}")
        audit.append(paths, outcome, begun=seq, revision=revision, intent=entry.get("intent"), files=sorted(changes),
                     removed=removed, reason=why)
        return Recovery(outcome, seq, revision, tuple(sorted(changes)), tuple(removed), why)
    why = f"{reason}; the saved copies of {before} and {after} needed to undo or finish it are missing"
    return Recovery("apply-unrecoverable", seq, None, tuple(sorted(files)), tuple(removed), why)


def _texts(paths: Paths, revision: str, files: dict[str, dict[str, str | None]],
           side: str) -> dict[str, str | None] | None:
    """The journaled files' text on one side, from the saved revision and checked against the begin's hashes;
    None when that side cannot be rebuilt. A side that wants every file absent needs no saved copy."""
    wanted = {rel: hashes.get(side) for rel, hashes in files.items()}
    if all(h is None for h in wanted.values()):
        return dict.fromkeys(wanted)
    try:
        harness = load_revision(paths, revision)
    except (RevisionMissing, LoushoError):
        return None
    texts = {rel: harness.files.get(rel) for rel in wanted}
    if any(text_hash(texts[rel]) != wanted[rel] for rel in wanted):
        return None
    return texts


def write_files(root: Path, changes: dict[str, str | None], *, prefix: str = "") -> None:
    """Make each path hold its text (None: absent) by staging it beside its target and renaming it in; a
    replaced file keeps its permission bits.

    Staged files are fsynced before the first rename; a skill folder emptied by a removal is removed too.
    A failure part-way leaves a mix the journal undoes: callers hold the write lock and have begun the write.
    Fault points (``<prefix>staged:<i>``, ``<prefix>replaced:<i>``, ``<prefix>unlinked:<i>``) let tests crash
    between any two steps.
    """
    staged: list[tuple[Path, Path | None]] = []
    for i, (rel, text) in enumerate(sorted(changes.items())):
        dest = root / rel
        if text is None:
            staged.append((dest, None))
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.lousho-{os.getpid()}.tmp")
        mode = _mode(dest)
        with tmp.open("w", encoding="utf-8", newline="") as f:
            if mode is not None:  # the replaced file's permission bits, set before its text is in the file
                os.fchmod(f.fileno(), mode)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        staged.append((dest, tmp))
        faults.point(f"{prefix}staged:{i}")
    for i, (dest, tmp) in enumerate(staged):
        if tmp is None:
            dest.unlink(missing_ok=True)
            faults.point(f"{prefix}unlinked:{i}")
            if dest.parent != root and dest.parent.is_dir() and not any(dest.parent.iterdir()):
                dest.parent.rmdir()
        else:
            os.replace(tmp, dest)
        faults.point(f"{prefix}replaced:{i}")
    for parent in {dest.parent for dest, _ in staged}:
        _sync_dir(parent)


def _mode(path: Path) -> int | None:
    """The permission bits of the file ``path`` replaces (a 0600 instructions.md stays 0600), None when new."""
    try:
        return stat.S_IMODE(path.lstat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except UnicodeDecodeError:
        return "\ufffd(not UTF-8)"  # hashes to neither side: treated as changed by someone else


def _strays(paths: Paths) -> list[Path]:
    """Staged harness files (``.<name>.lousho-<pid>.tmp`` next to instructions.md or a SKILL.md) and the loop's
    own temp files in ``.lousho/`` whose process is gone. Never through a symbolic link."""
    found: list[Path] = []
    root = paths.agent_dir
    if not root.is_dir():
        return found
    folders = [root]
    skills = root / "skills"
    if skills.is_dir() and not skills.is_symlink():
        folders += [d for d in skills.iterdir() if d.is_dir() and not d.is_symlink()]
    for folder in folders:
        found += [p for p in folder.iterdir() if _HARNESS_TMP.match(p.name) and not p.is_symlink() and p.is_file()]
    if paths.root.is_dir():
        for p in paths.root.iterdir():
            match = _LOOP_TMP.match(p.name)
            if match and not _alive(int(match.group(1))) and p.is_file() and not p.is_symlink():
                found.append(p)
    return sorted(found)


def _remove_strays(paths: Paths) -> list[str]:
    removed = []
    for path in _strays(paths):
        path.unlink(missing_ok=True)
        folder = path.parent
        # A skill folder the interrupted write created for a new skill holds nothing else: it goes too.
        if folder.parent == paths.agent_dir / "skills" and not any(folder.iterdir()):
            folder.rmdir()
        removed.append(path.relative_to(paths.agent_dir).as_posix())
    return removed


def _remove_empty_skill_folders(paths: Paths, absent: list[str]) -> None:
    """A new skill's folder made just before the crash, with nothing in it yet: the agent could not load it."""
    for rel in absent:
        folder = (paths.agent_dir / rel).parent
        if folder.parent == paths.agent_dir / "skills" and folder.is_dir() and not folder.is_symlink() \
                and not any(folder.iterdir()):
            folder.rmdir()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sync_dir(folder: Path) -> None:
    if not folder.is_dir():
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
