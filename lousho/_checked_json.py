"""JSON a file holds, parsed and checked against its contract in one step.

A leaf module: it imports nothing of ours, so every part whose files follow a JSON contract may use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def loads_checked(text: str, problem: Callable[[Any], str | None]) -> Any:
    """``text`` parsed; ``problem`` says why a parsed value breaks the contract (None: it keeps it).

    Raises ValueError with a message fit to follow the file's (and line's) name: ``not valid JSON: ...``
    or the problem. Callers turn it into their part's coded error.
    """
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not valid JSON: {e}") from None
    found = problem(data)
    if found:
        raise ValueError(found)
    return data
