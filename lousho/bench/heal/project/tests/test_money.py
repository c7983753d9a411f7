from decimal import Decimal

from calc.money import invoice_total, percent_change


def test_invoice_total() -> None:
    assert invoice_total([("2.50", 2), ("1.00", 1)]) == Decimal("6.00")


def test_percent_change_of_zero_change() -> None:
    assert percent_change(10.0, 10.0) == 0.0
