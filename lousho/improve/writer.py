"""The writer: the only code that writes harness files (seed §4.1).

It refuses the write when the directory changed since the cycle read it (stale) or when a file it
would write or remove is reached through a symbolic link (which may lead out of the agent directory),
checks the added text for prompt injection again, saves the revisions before and after under
``.lousho/revisions/``, writes all the files or none, and appends an audit entry. A rollback is a
write like any other: it restores a saved revision's bytes as a new entry in the history; nothing is
ever rewritten.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.improve import audit, injection
from lousho.improve.errors import LinkRefused, RevisionMissing, StaleHarness, WriteRefused
from lousho.improve.harness import Harness, linked_part, read_harness
from lousho.improve.locks import exclusive
from lousho.improve.state import Paths, iso, now_utc


@dataclass(frozen=True)
class Written:
    before: str
    after: str
    files: tuple[str, ...]


def write(paths: Paths, target: Harness, *, expected: str, action: str, check_injection: bool = True,
          **fields: Any) -> Written:
    """Make the agent directory's harness exactly ``target`` if it is still at revision ``expected``."""
    with exclusive(paths, "write"):
        return _write(paths, target, expected=expected, action=action, check_injection=check_injection, **fields)


def _write(paths: Paths, target: Harness, *, expected: str, action: str, check_injection: bool,
           **fields: Any) -> Written:
    current = read_harness(paths.agent_dir)
    if current.revision != expected:
        audit.append(paths, "write-refused", reason="stale", expected=expected, found=current.revision,
                     target=target.revision, **fields)
        raise StaleHarness(f"stale: the harness is at {current.revision}, not {expected} as when this edit was made")
    changed = current.changed_paths(target)
    links = _links(paths.agent_dir, changed)
    if links:
        audit.append(paths, "write-refused", reason="link", links=links, target=target.revision, **fields)
        raise LinkRefused("the edit would write through a symbolic link, maybe out of the agent directory: "
                          + ", ".join(f"{path} (via {via})" for path, via in links.items()))
    if check_injection:
        added = "\n".join(injection.added_text(current.files.get(p, ""), target.files.get(p, "")) for p in changed)
        findings = injection.injection_findings(added)
        if findings:
            audit.append(paths, "write-refused", reason="injection", findings=findings, target=target.revision,
                         **fields)
            raise WriteRefused("the added text looks like a prompt injection: " + ", ".join(findings))
    save_revision(paths, current)
    save_revision(paths, target)
    _replace_all(paths.agent_dir, current, target, changed)
    after = read_harness(paths.agent_dir)
    if after.revision != target.revision:  # a hand edit outside the writer, between our check and our write
        audit.append(paths, "write-conflict", expected=target.revision, found=after.revision, **fields)
        raise StaleHarness(f"the harness ended at {after.revision}, not {target.revision}: edited during the write")
    audit.append(paths, action, before=current.revision, after=target.revision, files=changed, **fields)
    return Written(current.revision, target.revision, tuple(changed))


def save_revision(paths: Paths, harness: Harness) -> Path:
    """``.lousho/revisions/<rev>/``: the harness files and a meta.json; saved once, never changed."""
    folder = paths.revisions / harness.revision
    if (folder / "meta.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in harness.files.items():
        out = folder / "files" / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8", newline="")
    meta = {"revision": harness.revision, "saved_at": iso(now_utc()), "files": sorted(harness.files),
            "read_only": sorted(harness.read_only)}
    (folder / "meta.json").write_text(json.dumps(meta, sort_keys=True) + "\n", encoding="utf-8")
    return folder


def load_revision(paths: Paths, revision: str) -> Harness:
    folder = paths.revisions / revision
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RevisionMissing(f"no saved revision {revision!r} in {paths.revisions}") from None
    files = {rel: (folder / "files" / rel).read_bytes().decode("utf-8") for rel in meta["files"]}
    return Harness(files, frozenset(meta.get("read_only", [])))


def saved_revisions(paths: Paths) -> list[str]:
    if not paths.revisions.is_dir():
        return []
    return sorted(p.name for p in paths.revisions.iterdir() if (p / "meta.json").exists())


def _links(root: Path, changed: list[str]) -> dict[str, str]:
    """Changed paths reached through a symbolic link, each with the link. Any link is refused, not
    only one that leads out: the staging, the rename, a removal and the undo all go through the path,
    and a link inside today can be pointed outside between the check and the write."""
    found = {path: linked_part(root, path) for path in changed}
    return {path: via for path, via in found.items() if via is not None}


def _replace_all(root: Path, current: Harness, target: Harness, changed: list[str]) -> None:
    """Stage every new file beside its target, then rename them in; on any failure put back what was
    already replaced, so the directory holds the old harness or the new one, never a mix."""
    staged: list[tuple[Path, Path | None]] = []
    try:
        for rel in changed:
            dest = root / rel
            text = target.files.get(rel)
            if text is None:
                staged.append((dest, None))
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.lousho-{os.getpid()}.tmp")
            with tmp.open("w", encoding="utf-8", newline="") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            staged.append((dest, tmp))
    except BaseException:
        for _, tmp in staged:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
        raise
    done: list[str] = []
    try:
        for (dest, tmp), rel in zip(staged, changed, strict=True):
            if tmp is None:
                dest.unlink(missing_ok=True)
                if dest.parent != root and not any(dest.parent.iterdir()):
                    dest.parent.rmdir()
            else:
                os.replace(tmp, dest)
            done.append(rel)
    except BaseException:
        for rel in done:
            old = current.files.get(rel)
            dest = root / rel
            if old is None:
                dest.unlink(missing_ok=True)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(old, encoding="utf-8", newline="")
        raise
