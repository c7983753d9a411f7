"""List helpers."""

from __future__ import annotations


def chunk(items: list, size: int) -> list[list]:
    """``items`` in consecutive pieces of ``size``; the last piece may be shorter."""
    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]
