"""Package names that load on first use (PEP 562), so importing a package costs nothing until a name
is used: `lousho stats` need not load DuckDB, a plot need not load until it is drawn, and an agent
importing the export helper need not load the query stack."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[list[str], Callable[[str], Any]]:
    """``__all__`` and a module ``__getattr__`` resolving each name of ``exports`` (name -> module) on use.

    A resolved name is stored on the package, with every other name its module exports, so that it
    wins over a submodule of the same name: loading ``lousho.observe.agent_run`` binds the module to
    the package's ``agent_run``, and the package must still give the function, as an eager import did.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(module)
        namespace = sys.modules[package]
        for other, source in exports.items():
            if source == module:
                setattr(namespace, other, getattr(loaded, other))
        return getattr(loaded, name)

    return sorted(exports), __getattr__
