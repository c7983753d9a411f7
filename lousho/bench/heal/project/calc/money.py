"""Money helpers. Prices are decimal strings such as "19.99"."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


def cents(amount: Decimal) -> Decimal:
    """An amount rounded half-up to whole cents."""
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def invoice_total(lines: list[tuple[str, int]]) -> Decimal:
    """The total of (unit price, quantity) lines, in cents."""
    total = sum(float(price) * quantity for price, quantity in lines)
    return Decimal(str(round(total, 2)))


def percent_change(old: float, new: float) -> float:
    """How much ``new`` differs from ``old``, in percent of ``old``."""
    return (old - new) / old * 100
