from calc.numbers import clamp, median


def test_clamp_inside() -> None:
    assert clamp(5, 5, 5) == 5


def test_median_odd() -> None:
    assert median([3, 1, 2]) == 2
