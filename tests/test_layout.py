"""The tests have no __init__.py, so pytest imports each module by its basename: two alike would clash."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_every_test_module_has_a_unique_basename() -> None:
    names = Counter(p.name for p in Path(__file__).parent.rglob("*.py") if p.name != "conftest.py")
    assert [n for n, c in names.items() if c > 1] == []
