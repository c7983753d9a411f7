"""Check the text an edit adds for prompt injection, copied run text and quoted checks.

Spec defences (3) to (5): what an editor adds to instructions or a skill is checked when the editor
writes it (and again at write time elsewhere); model text bound for a card, notification or audit
log is made plain text; an edit that names a failed check is rejected or flagged. The heuristics
favour few false positives on ordinary instructions: a flagged edit costs a review, a missed one
costs trust, and both are tested.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable

from lousho.improve.sanitize import contains_marker
from lousho.kernel.text_safety import has_hidden, remove_hidden

_HTML_TAGS = (
    "a|abbr|audio|b|base|body|br|button|center|code|details|div|em|embed|font|form|frame|frameset|h[1-6]|head|"
    "hr|html|i|iframe|img|input|label|li|link|marquee|math|meta|noscript|object|ol|option|p|pre|script|select|"
    "slot|source|span|strong|style|summary|svg|table|td|template|textarea|th|title|tr|u|ul|video"
)
_URL = r"\b(?:https?|ftp|file|javascript|data|mailto|vbscript):[^\s<>\"'`]+|\bwww\.[^\s<>\"'`]+"

# (reason, pattern), checked in this order on the normalised text; reasons are stable strings.
_HEURISTICS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern, re.IGNORECASE))
    for reason, pattern in (
        ("override: ignore previous instructions",
         r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:(?:all|any|every|the|your|my|these|those|of)\s+){0,3}"
         r"(?:previous|prior|above|earlier|preceding|former|original|system)\s+"
         r"(?:instructions?|rules?|messages?|prompts?|directions?|guidelines?|guidance)\b"),
        ("override: new instructions", r"\bnew\s+instructions?\b"),
        ("override: system prompt", r"\bsystem\s+prompt\b"),
        ("override: developer message", r"\bdeveloper\s+(?:message|mode|instructions?)\b"),
        ("role play: you are now", r"\byou\s+are\s+now\b|\bfrom\s+now\s+on,?\s+you\s+are\b"),
        ("role play: act as", r"\bact\s+as\b|\bpretend\s+(?:to\s+be|you\s+are)\b"),
        ("image", r"!\[[^\[\]\n]{0,500}\]\s*[(\[]"),
        ("link", rf"{_URL}|\[[^\[\]\n]{{0,500}}\]\([^()\s]{{1,500}}[^()]{{0,500}}\)"),
        ("html", rf"<\s*/?\s*(?:{_HTML_TAGS})\b[^<>]*>|<!--|<\s*[a-z][\w-]*\s+[\w-]+\s*=[^<>]*>"),
        ("exfiltration: email address",
         r"[\w.+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}\b"),
    )
)
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{60,}={0,2}")


def added_text(before: str, after: str) -> str:
    """The lines of ``after`` that are not in ``before`` (inserted or replaced), in order."""
    old, new = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    added = [line for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("insert", "replace") for line in new[j1:j2]]
    return "\n".join(added)


def _normalise(text: str) -> str:
    """Fold lookalikes and width (NFKC), drop hidden characters, and make each whitespace run one space."""
    return " ".join(remove_hidden(unicodedata.normalize("NFKC", text)).split())


def _looks_like_base64(run: str) -> bool:
    # Base64 of anything mixes cases and digits; a long identifier or a hex digest does not.
    return any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)


def injection_findings(text: str) -> list[str]:
    """Why ``text`` looks like a prompt injection, as stable short reasons; empty when it looks clean."""
    normal = _normalise(text)
    findings = [reason for reason, pattern in _HEURISTICS if pattern.search(normal)]
    if contains_marker(text):
        findings.append("marker")
    if has_hidden(text):
        findings.append("hidden characters")
    if any(_looks_like_base64(match.group()) for match in _BASE64_RUN.finditer(normal)):
        findings.append("base64 blob")
    return findings


def _shingles(text: str, size: int) -> Iterable[str]:
    return (text[start:start + size] for start in range(len(text) - size + 1))


def copied_from_untrusted(added: str, sources: Iterable[str], min_chars: int = 40) -> bool:
    """Whether ``added`` shares a run of at least ``min_chars`` characters with any source text.

    Both sides are compared after NFKC, case folding and collapsing whitespace, so re-spacing or
    re-casing a copied tool result does not hide it. The added text's windows go into a set and each
    source is scanned once, window by window: linear in the sources, not added-times-sources.
    """
    if min_chars < 1:
        raise ValueError(f"min_chars must be at least 1, got {min_chars}")
    wanted = set(_shingles(_normalise(added).casefold(), min_chars))
    if not wanted:
        return False
    return any(
        window in wanted for source in sources for window in _shingles(_normalise(source).casefold(), min_chars)
    )


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).casefold())


def quoted_checks(added: str, names: Iterable[str]) -> list[str]:
    """The failed-check names that ``added`` contains, in the order given, each once.

    Case and the separators between words (``-``, ``_``, space, ``.``, any punctuation) are ignored,
    so ``Sum Correct`` and ``sum_correct`` both quote ``sum-correct``. A name must start and end on
    word boundaries of the added text (``sum`` is not quoted by ``summary``). Names of fewer than three
    letters and digits are ignored: they would match ordinary words.
    """
    words = _words(added)
    joined = "".join(words)
    # Offsets in ``joined`` where a word starts and where one ends.
    starts, ends, offset = set(), set(), 0
    for word in words:
        starts.add(offset)
        offset += len(word)
        ends.add(offset)
    found: list[str] = []
    for name in names:
        target = "".join(_words(name))
        if len(target) < 3 or name in found:
            continue
        position = joined.find(target)
        while position != -1:
            if position in starts and position + len(target) in ends:
                found.append(name)
                break
            position = joined.find(target, position + 1)
    return found


# Bracketed parts exclude their own opening bracket and are bounded, so "[[[[..." stays linear.
_IMAGE = re.compile(r"!\[[^\[\]\n]{0,500}\]\s*(?:\([^()\n]{0,2000}\)|\[[^\[\]\n]{0,500}\])")
# Not our own placeholder before a space: "[link removed] (Errno 111 ...)" is a URL removed before a
# parenthesis, and reading the two as a link dropped the parenthesis (a refused connection's reason).
_LINK = re.compile(r"\[(?!link removed\]\s)([^\[\]\n]{0,500})\]\s*(?:\([^()\n]{0,2000}\)|\[[^\[\]\n]{0,500}\])")
_LINK_DEFINITION = re.compile(r"^[ \t]*\[[^\]\n]+\]:[^\n]*$", re.MULTILINE)
_TAG = re.compile(r"</?[A-Za-z!?][^<>]*>")
_PLAIN_URL = re.compile(_URL, re.IGNORECASE)
_BARE_DOMAIN = re.compile(
    r"\b(?:[a-z0-9-]{1,63}\.){1,8}(?:com|net|org|io|ai|dev|app|co|xyz|info|me|ly|gg|site|online|link|click|top|ru|cn|tk)"
    r"\b(?:/[^\s<>\"'`]*)?",
    re.IGNORECASE,
)
_LINK_REMOVED = "[link removed]"


def _url_replacement(match: re.Match[str]) -> str:
    # Sentence punctuation after a URL belongs to the sentence, not the URL.
    url = match.group()
    trail = len(url) - len(url.rstrip(".,;:!?)]}"))
    return _LINK_REMOVED + (url[len(url) - trail:] if trail else "")


def _plain_once(text: str) -> str:
    # The shared hidden set, and carriage returns too: a card or log line is read on a terminal,
    # where a CR would let the text after it overwrite the text before.
    text = remove_hidden(text).replace("\r", "")
    text = _IMAGE.sub("", text)
    text = _LINK_DEFINITION.sub("", text)
    text = _LINK.sub(lambda match: match.group(1), text)
    text = _TAG.sub("", text)
    text = _PLAIN_URL.sub(_url_replacement, text)
    return _BARE_DOMAIN.sub(_url_replacement, text)


def plain_text(text: str) -> str:
    """Model text made safe for a card, notification or audit log (defence 4): no links, images or HTML.

    Markdown images go, markdown links keep only their text, URLs (and bare domains a renderer would
    link) become ``[link removed]``, HTML tags go, and control characters other than newline and tab
    go. Repeats until nothing changes, since removing a tag can join a URL back together.
    """
    for _ in range(50):
        plain = _plain_once(text)
        if plain == text:
            break
        text = plain
    return text
