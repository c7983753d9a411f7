"""Durations written like "1h30m" or "45s"."""

from __future__ import annotations

import re

_UNITS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> int:
    """The duration in seconds."""
    total = 0
    for number, unit in re.findall(r"(\d+)([hm])", text):
        total += int(number) * _UNITS[unit]
    return total
