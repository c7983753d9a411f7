from calc.text import slugify, title_case, word_count


def test_slugify() -> None:
    assert slugify("hello world") == "hello-world"


def test_word_count() -> None:
    assert word_count("one two three") == 3


def test_title_case() -> None:
    assert title_case("hello world") == "Hello World"
