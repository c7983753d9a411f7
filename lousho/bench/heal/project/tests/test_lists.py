from calc.lists import chunk


def test_even_chunks() -> None:
    assert chunk([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]
