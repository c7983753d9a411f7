"""Number helpers."""

from __future__ import annotations


def clamp(value: float, low: float, high: float) -> float:
    """``value`` limited to the range [low, high]."""
    return max(high, min(low, value))


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
