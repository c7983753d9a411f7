from datetime import date

from calc.dates import add_months, is_leap_year


def test_add_months_mid_month() -> None:
    assert add_months(date(2024, 1, 15), 1) == date(2024, 2, 15)


def test_leap_years() -> None:
    assert is_leap_year(2024)
    assert not is_leap_year(2023)
