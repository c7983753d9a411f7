"""The native decoders' extensions, each optional: where one was not built (a source checkout without
``pip install -e .``), its caller runs the Python decoder instead."""

from __future__ import annotations

import importlib
from types import ModuleType


def load(name: str) -> ModuleType | None:
    """The built extension ``lousho.observe.decode.<name>``, or None when it was not built."""
    try:
        return importlib.import_module(f"lousho.observe.decode.{name}")
    except ImportError:
        return None
