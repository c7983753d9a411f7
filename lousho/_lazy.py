"""Package names that load on first use (PEP 562), so importing a package costs nothing until a name
is used: `lousho stats` need not load DuckDB, a plot need not load until it is drawn."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[list[str], Callable[[str], Any]]:
    """``__all__`` and a module ``__getattr__`` resolving each name of ``exports`` (name -> module) on use."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return sorted(exports), __getattr__
