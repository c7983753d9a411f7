"""Characters a reader cannot see: one definition for every check and cleaner of untrusted text.

A leaf module (it imports nothing of ours), so any part may use it. Model and run text reaches an
editor, a card, the audit log and the injection checks; each removes (or reports) the same set, so a
character one path keeps cannot carry what another path removed. The set:

- invisible format characters: soft hyphen, combining grapheme joiner, zero-width spaces and joiners,
  bidi marks, embeddings, overrides and isolates, word joiners and invisible operators, the Mongolian
  vowel separator, the BOM, interlinear annotation marks, Unicode tag characters, and the fillers that
  render as nothing: Hangul U+115F, U+1160, U+3164, U+FFA0, Khmer U+17B4, U+17B5;
- C0 and C1 control characters and DEL, except tab, newline and carriage return (a line ending of a
  file written on Windows is not hidden text).

They can split a word so a pattern misses it ("ign\\u200bore previous instructions"), or make text read
differently from what it holds (U+202E reverses what follows).

A terminal is the other reader: stored and model text printed there (span names, status messages,
attributes, explanations, model output) shows each character of the set, every control character
(ESC starts CSI and OSC sequences; CR and backspace overwrite what was printed) and the line
separators U+2028/U+2029 as its Python escape instead (``visible``, ``safe_text``): ``\\x1b``,
``\\u202e``, and ``\\n``, ``\\r``, ``\\t`` for newline, carriage return and tab. A backslash already in
the text is left as it is, so the escape is for reading, not for decoding back. Such text is never
parsed as rich markup (a ``[/]`` would crash the printer, a ``[link=...]`` would hide a hyperlink).
JSON and CSV output do not go through here: they are for programs and keep the bytes exact.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

# As regular-expression class ranges, so one string serves the patterns and the tests.
INVISIBLE_RANGES = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f"
)
CONTROL_RANGES = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"

HIDDEN = re.compile(f"[{CONTROL_RANGES}{INVISIBLE_RANGES}]")


def has_hidden(text: str) -> bool:
    """Whether ``text`` holds any character of the set."""
    return HIDDEN.search(text) is not None


def remove_hidden(text: str) -> str:
    """``text`` without any character of the set; tab, newline and carriage return stay."""
    return HIDDEN.sub("", text)


_LINE_SEPARATORS = frozenset("\u2028\u2029")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _unsafe(char: str) -> bool:
    return char in _LINE_SEPARATORS or unicodedata.category(char) == "Cc" or HIDDEN.match(char) is not None


def visible(value: object, *, newlines: bool = False) -> str:
    """``str(value)`` for a terminal: every character of the set, every control character and the line
    separators shown as its escape.

    With ``newlines`` a plain newline is kept (for multi-line text such as a diff or a card), every
    other control character is still escaped; without it a newline shows as ``\\n`` (a table cell or a
    tree label stays one line)."""
    text = str(value)
    if not any(_unsafe(c) for c in text):
        return text
    return "".join(c if (newlines and c == "\n") or not _unsafe(c) else _escape(c) for c in text)


def safe_text(value: object, style: str | None = None, *, newlines: bool = False) -> Text:
    """A rich ``Text`` of ``visible(value)``: printed as it reads, never parsed as markup."""
    from rich.text import Text  # only a printer needs rich; the checks and cleaners above do not

    return Text(visible(value, newlines=newlines), style=style or "")
