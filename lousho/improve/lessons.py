"""The per-agent lesson library (seed §3.4 "Learning across cycles"): ``.lousho/lessons.jsonl``.

After a cycle is decided a reflection session may write one short, general lesson. Editors of later
cycles read up to :data:`SHOWN` active lessons as untrusted data and cite the ones they use
("lesson 3"). A kept edit gives its cited lessons a helped vote, a rolled-back one a hurt vote, and a
lesson retires once its hurt votes outnumber its helped votes by :data:`RETIRE_MARGIN`.

A lesson is model text that every later editor reads, so what may enter is narrow: no injection
phrasing, links or HTML (defences 3 and 4), nothing over :data:`MAX_CHARS`, no failed check's name
(defence 5, so no later edit learns to quote one), and no repeat of a stored lesson.

The library is small, so every change rewrites the whole file through a temp file and a rename: a crash
leaves the old or the new library, never half of one. Writers in one process are serialised by a lock;
across processes the watcher's lease already makes one writer per agent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from lousho.improve import injection
from lousho.improve.state import Paths, iso, now_utc
from lousho.kernel.errors import UsageError

MAX_CHARS = 400
SHOWN = 20  # lessons an editor reads
RETIRE_MARGIN = 2  # hurt - helped at which a lesson retires

_LINK_REMOVED = "[link removed]"


class LessonsInvalid(UsageError):
    code = "LOUSHO_IMPROVE_LESSONS_INVALID"
    hint = "fix or delete .lousho/lessons.jsonl: one JSON lesson object per line"


@dataclass(frozen=True)
class Lesson:
    id: str  # L-<8 hex>, from the normalised text: the same lesson always gets the same id
    text: str
    created_at: str  # ISO UTC
    cycle: str  # the cycle whose reflection wrote it
    helped: int = 0
    hurt: int = 0
    retired: bool = False
    retired_at: str | None = None


def _normalise(text: str) -> str:
    """What makes two lessons "the same": width, case, spacing and a closing full stop don't count."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split()).rstrip(" .!")


def lesson_id(text: str) -> str:
    return "L-" + hashlib.sha256(_normalise(text).encode("utf-8", "surrogatepass")).hexdigest()[:8]


def load(paths: Paths) -> list[Lesson]:
    """The whole library in file order (oldest first); ``[]`` when there is none yet."""
    try:
        raw = paths.lessons.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    known = {f.name for f in dataclasses.fields(Lesson)}
    lessons: list[Lesson] = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            # Unknown keys are ignored, so a newer lousho's library still loads.
            lessons.append(Lesson(**{k: v for k, v in data.items() if k in known}))
        except (ValueError, TypeError, AttributeError) as e:
            raise LessonsInvalid(f"{paths.lessons}:{number}: not a lesson: {e}") from None
    return lessons


def save(paths: Paths, lessons: Sequence[Lesson]) -> None:
    """Replace the library with ``lessons``: one sorted-key JSON object a line, written atomically."""
    paths.ensure()
    body = "".join(json.dumps(dataclasses.asdict(lesson), sort_keys=True) + "\n" for lesson in lessons)
    tmp = paths.lessons.with_name(f".{paths.lessons.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, paths.lessons)


def refusal(text: str, failed_checks: Iterable[str]) -> str | None:
    """Why ``text`` may not become a lesson, or None. Duplicates are :func:`add`'s to find (it reads the library)."""
    text = text.strip()
    if not text:
        return "empty"
    if len(text) > MAX_CHARS:
        return f"too long: {len(text)} characters (at most {MAX_CHARS})"
    findings = injection.injection_findings(text)
    # plain_text also removes bare domains ("evil.example.com/x") that a renderer would turn into links.
    if "link" not in findings and injection.plain_text(text).count(_LINK_REMOVED) > text.count(_LINK_REMOVED):
        findings.append("link")
    if findings:
        return "looks like a prompt injection (" + ", ".join(findings) + ")"
    quoted = injection.quoted_checks(text, failed_checks)
    if quoted:
        return "quotes a failed check (" + ", ".join(quoted) + ")"
    return None


_LOCK = threading.Lock()


def add(paths: Paths, text: str, *, cycle: str, failed_checks: Iterable[str],
        at: datetime | None = None) -> Lesson | str:
    """Store ``text`` (stripped) as a new lesson and return it, or return why it was refused (nothing stored).

    A repeat of any stored lesson is refused, a retired one included: a lesson that hurt must not come back.
    """
    reason = refusal(text, failed_checks)
    if reason is not None:
        return reason
    text = text.strip()
    lesson = Lesson(lesson_id(text), text, iso(at or now_utc()), cycle)
    with _LOCK:
        library = load(paths)
        for old in library:
            if old.id == lesson.id:
                return f"duplicate of lesson {old.id}" + (" (retired)" if old.retired else "")
        save(paths, [*library, lesson])
    return lesson


def active(paths: Paths, limit: int = SHOWN) -> list[Lesson]:
    """Lessons not retired, newest first, at most ``limit``."""
    live = [lesson for lesson in reversed(load(paths)) if not lesson.retired]
    # Stable sort on the reversed file: lessons with the same timestamp keep "added later comes first".
    live.sort(key=lambda lesson: lesson.created_at, reverse=True)
    return live[:max(0, limit)]


def vote(paths: Paths, lesson_ids: Iterable[str], *, helped: bool, at: datetime | None = None) -> list[Lesson]:
    """One helped (kept edit) or hurt (rolled-back edit) vote for each cited lesson; return those it retired.

    An id cited twice votes once; unknown ids and lessons already retired are skipped, so a retired
    lesson never comes back through a late vote.
    """
    wanted = set(lesson_ids)
    when = iso(at or now_utc())
    retired: list[Lesson] = []
    with _LOCK:
        library = load(paths)
        updated: list[Lesson] = []
        for lesson in library:
            if lesson.id in wanted and not lesson.retired:
                lesson = dataclasses.replace(lesson, helped=lesson.helped + int(helped),
                                             hurt=lesson.hurt + int(not helped))
                if lesson.hurt - lesson.helped >= RETIRE_MARGIN:
                    lesson = dataclasses.replace(lesson, retired=True, retired_at=when)
                    retired.append(lesson)
            updated.append(lesson)
        if updated != library:
            save(paths, updated)
    return retired


# "lesson 3", "Lesson #3", "lessons 1 and 3", "lessons 1, 2, and 4", "lessons 2 & 5", "lessons 1 or 2".
_NUMBER = r"#?\s*\d+\b"
_JOIN = r"(?:\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+|\s*&\s*)"
_CITATION = re.compile(rf"\blessons?\s*({_NUMBER}(?:{_JOIN}{_NUMBER})*)", re.IGNORECASE)


def cited(summary: str, shown: Sequence[Lesson]) -> list[str]:
    """The ids of the ``shown`` lessons that ``summary`` cites by 1-based number, in order of first citation."""
    ids: list[str] = []
    for match in _CITATION.finditer(summary):
        for number in re.findall(r"\d+", match.group(1)):
            index = int(number)
            if 1 <= index <= len(shown) and shown[index - 1].id not in ids:
                ids.append(shown[index - 1].id)
    return ids
