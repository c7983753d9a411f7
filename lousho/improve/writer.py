"""The writer: the only code that writes harness files (seed §4.1).

It refuses the write when the directory changed since the cycle read it (stale) or when a file it
would write or remove is reached through a symbolic link (which may lead out of the agent directory),
checks the added text for prompt injection again, saves the revisions before and after under
``.lousho/revisions/``, and writes all the files or none, journaled in the audit log (``journal``): an
``apply-begin`` line first, the action's line last, and a write cut short by a crash undone before the next
one. A rollback is a write like any other: it restores a saved revision's bytes as a new entry in the
history; nothing is ever rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lousho.improve import audit, faults, injection, journal
from lousho.improve.errors import LinkRefused, RevisionMissing, StaleHarness, WriteFailed, WriteRefused
from lousho.improve.harness import Harness, linked_part, read_harness
from lousho.improve.locks import exclusive
from lousho.improve.revisions import load_revision, save_revision, saved_revisions
from lousho.improve.state import Paths

__all__ = ["LinkRefused", "RevisionMissing", "StaleHarness", "WriteRefused", "Written", "load_revision",
           "save_revision", "saved_revisions", "write", "WriteFailed"]


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
    recovered = journal.recover_locked(paths)  # an earlier write cut short: undone before the harness is read
    if recovered is not None and recovered.outcome == "apply-unrecoverable":
        raise journal.ApplyUnrecoverable(recovered.reason)
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
    locked = [path for path in changed if path in current.read_only] if action == "apply" else []
    if locked:  # a skill folder that gained scripts since the edit was made (the revision hashes SKILL.md only)
        audit.append(paths, "write-refused", reason="read-only", files=locked, target=target.revision, **fields)
        raise WriteRefused(f"read-only: {', '.join(locked)} (its skill folder holds other files this SKILL.md "
                           "describes); edit it by hand", hint="a skill folder with other files is read-only; the "
                           "edit was not written")
    if check_injection:
        added = "\n".join(injection.added_text(current.files.get(p, ""), target.files.get(p, "")) for p in changed)
        findings = injection.injection_findings(added)
        if findings:
            audit.append(paths, "write-refused", reason="injection", findings=findings, target=target.revision,
                         **fields)
            raise WriteRefused("the added text looks like a prompt injection: " + ", ".join(findings))
    save_revision(paths, current)
    save_revision(paths, target)
    faults.point("saved")
    begun = journal.begin(paths, action, current, target, changed, **fields)
    faults.point("begun")
    try:
        journal.write_files(paths.agent_dir, {rel: target.files.get(rel) for rel in changed})
    except Exception as e:  # a full disk, a permission: put back what was replaced, and say so in the log
        journal.recover_locked(paths, reason=f"the write failed: {type(e).__name__}: {e}")
        if isinstance(e, OSError):  # the user's to fix, not a bug: a coded error, not a traceback
            raise WriteFailed(f"the harness could not be written, nothing changed: {type(e).__name__}: {e}") from e
        raise
    faults.point("written")
    after = read_harness(paths.agent_dir)
    if after.revision != target.revision:  # a hand edit outside the writer, between our check and our write
        audit.append(paths, "write-conflict", expected=target.revision, found=after.revision, begun=begun, **fields)
        raise StaleHarness(f"the harness ended at {after.revision}, not {target.revision}: edited during the write")
    # The commit point: this line closes the begin; a crash before it is undone by the next command.
    audit.append(paths, action, before=current.revision, after=target.revision, files=changed, begun=begun,
                 **fields)
    faults.point("done")
    return Written(current.revision, target.revision, tuple(changed))


def _links(root: Path, changed: list[str]) -> dict[str, str]:
    """Changed paths reached through a symbolic link, each with the link. Any link is refused, not
    only one that leads out: the staging, the rename, a removal and the undo all go through the path,
    and a link inside today can be pointed outside between the check and the write."""
    found = {path: linked_part(root, path) for path in changed}
    return {path: via for path, via in found.items() if via is not None}
