"""JSON a file or a request body holds, parsed and checked against its contract in one step."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from lousho.kernel._checked_json import (
    NestedTooDeep,
    invalid_text,
    loads_bounded,
    loads_checked,
    may_hold_invalid_text,
    nested_past,
)


def must_be_object(data: Any) -> str | None:
    return None if isinstance(data, dict) else "expected a JSON object"


def test_a_value_that_keeps_the_contract_is_returned() -> None:
    assert loads_checked('{"a": 1}', must_be_object) == {"a": 1}


@pytest.mark.parametrize(("text", "message"), [("{nope", "not valid JSON: "), ("[1]", "expected a JSON object")])
def test_text_that_is_not_json_or_breaks_the_contract_says_which(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        loads_checked(text, must_be_object)


def _depth(value: Any) -> int:
    """Arrays and objects nested in a parsed value, counted the plain recursive way."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


def _value(rng: random.Random, level: int) -> Any:
    """Arrays, objects, and strings full of what could fool a scan of brackets: brackets, quotes, backslashes."""
    roll = rng.random()
    if level > 12 or roll < 0.3:
        return rng.choice([1, None, "[{", '"]', "\\", '\\"}', "\\\\[", "\U0001f600", "\u00e9]"])
    if roll < 0.65:
        return [_value(rng, level + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", "[", '"{', "\\"]) + str(i): _value(rng, level + 1) for i in range(rng.randint(0, 3))}


def test_the_nesting_scan_measures_what_the_parse_finds_in_every_encoding() -> None:
    rng = random.Random(7)
    for _ in range(1500):
        value = _value(rng, 0)
        body = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode(rng.choice(["utf-8", "utf-16", "utf-32"]))
        depth = _depth(value)
        assert not nested_past(body, depth) and (depth == 0 or nested_past(body, depth - 1)), body


@pytest.mark.parametrize(("body", "depth"), [
    (b"[" * 100_000 + b"]" * 100_000, 100_000), (b"[" * 100_000, 100_000),  # an unclosed one is measured too
    (b'"' + b'\\"[' * 100_000, 0), (b'{"a": "[[[", "b": [[]]}', 3), (b'["\\\\", [[]]]', 3),
])
def test_a_deep_or_odd_body_is_measured_without_recursion(body: bytes, depth: int) -> None:
    assert not nested_past(body, depth) and (depth == 0 or nested_past(body, depth - 1))


def test_a_body_nested_past_the_bound_is_refused_before_it_is_parsed() -> None:
    assert loads_bounded(b"[[1]]", 2) == [[1]]
    with pytest.raises(NestedTooDeep, match="^the body nests arrays and objects more than 2 deep$"):
        loads_bounded(b"[[[1]]]", 2)
    with pytest.raises(NestedTooDeep):
        loads_bounded(b"[" * 1_000_000, 128)  # json.loads would recurse into it


def test_text_that_is_not_valid_unicode_is_found_in_keys_and_strings_at_any_depth() -> None:
    assert invalid_text({"a": ["\U0001f600", {"b": "\u00e9"}]}) is None
    assert invalid_text({"a": [1, {"b": "x\ud800"}]}) == "'x\\ud800'"
    assert invalid_text([[[{"\udc00": 1}]]]) == "'\\udc00'"
    assert invalid_text(json.loads(b'["a\xed\xa0\x80"]')) == "'a\\ud800'"  # surrogate bytes, which json.loads takes
    deep: Any = "\ud800"
    for _ in range(100_000):
        deep = [deep]
    assert invalid_text(deep) == "'\\ud800'"


@pytest.mark.parametrize(("body", "may"), [
    (b'{"a": "plain \\u00e9 \xc3\xa9"}', False), (b'{"a": "\\ud800"}', True), (b'{"a": "\\uDC00"}', True),
    (b'{"a": "\xed\xa0\x80"}', True), (b'{"a": "\xed\x9f\xbf"}', False), ('{"a": 1}'.encode("utf-16"), True),
])
def test_a_body_that_may_hold_a_lone_surrogate_is_told_apart_in_one_scan(body: bytes, may: bool) -> None:
    assert may_hold_invalid_text(body) is may
    assert may or invalid_text(json.loads(body)) is None
