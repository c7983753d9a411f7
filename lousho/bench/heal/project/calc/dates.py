"""Date helpers."""

from __future__ import annotations

import calendar
from datetime import date


def days_in_month(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


def add_months(day: date, months: int) -> date:
    """The same day ``months`` months later (earlier for a negative count)."""
    index = day.month - 1 + months
    year, month = day.year + index // 12, index % 12 + 1
    return date(year, month, day.day)


def is_leap_year(year: int) -> bool:
    return year % 4 == 0
