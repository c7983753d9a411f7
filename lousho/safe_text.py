"""Stored and model text made safe for a terminal.

Span names, status messages, attributes, scores' explanations and model output come from agents, so
a printer treats them as untrusted: never as rich markup (a ``[/]`` would crash the printer, a
``[link=...]`` would hide a hyperlink) and never with control characters that the terminal would
obey (ESC starts CSI and OSC sequences: a cleared screen, a retitled window, a hidden OSC 8 link;
CR and backspace overwrite what was printed; U+202E reverses what follows).

Each such character is shown as its Python escape instead: ``\\x1b``, ``\\x07``, ``\\x9b``,
``\\u202e``, and ``\\n``, ``\\r``, ``\\t`` for newline, carriage return and tab. A backslash already in
the text is left as it is, so the escape is for reading, not for decoding back. JSON and CSV output
do not go through here: they are for programs and keep the bytes exact.
"""

from __future__ import annotations

import unicodedata

from rich.text import Text

# Format characters that reorder or hide text (Unicode's bidi controls), and line separators that a
# terminal may break on; the Cc category (C0, DEL, C1) is handled by category below.
_REORDERING = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _unsafe(char: str) -> bool:
    return char in _REORDERING or unicodedata.category(char) == "Cc"


def visible(value: object, *, newlines: bool = False) -> str:
    """``str(value)`` with every control, bidi and line-separator character shown as its escape.

    With ``newlines`` a plain newline is kept (for multi-line text such as a diff or a card), every
    other control character is still escaped; without it a newline shows as ``\\n`` (a table cell or a
    tree label stays one line)."""
    text = str(value)
    if not any(_unsafe(c) for c in text):
        return text
    return "".join(c if (newlines and c == "\n") or not _unsafe(c) else _escape(c) for c in text)


def safe_text(value: object, style: str | None = None, *, newlines: bool = False) -> Text:
    """A rich ``Text`` of ``visible(value)``: printed as it reads, never parsed as markup."""
    return Text(visible(value, newlines=newlines), style=style or "")
