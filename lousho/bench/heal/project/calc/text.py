"""Text helpers."""

from __future__ import annotations

import re


def slugify(text: str) -> str:
    """A URL slug: lowercase letters and digits, words joined by single dashes."""
    return text.lower().replace(" ", "-")


def word_count(text: str) -> int:
    return len(text.split(" "))


def title_case(text: str) -> str:
    """Each word with a capital first letter; the rest of the word is kept."""
    return text.title()


def squash_spaces(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
