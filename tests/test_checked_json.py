"""JSON a file holds, parsed and checked against its contract in one step."""

from __future__ import annotations

from typing import Any

import pytest

from lousho._checked_json import loads_checked


def must_be_object(data: Any) -> str | None:
    return None if isinstance(data, dict) else "expected a JSON object"


def test_a_value_that_keeps_the_contract_is_returned() -> None:
    assert loads_checked('{"a": 1}', must_be_object) == {"a": 1}


@pytest.mark.parametrize(("text", "message"), [("{nope", "not valid JSON: "), ("[1]", "expected a JSON object")])
def test_text_that_is_not_json_or_breaks_the_contract_says_which(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        loads_checked(text, must_be_object)
