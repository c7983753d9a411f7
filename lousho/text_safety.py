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
"""

from __future__ import annotations

import re

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
