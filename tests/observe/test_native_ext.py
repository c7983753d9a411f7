"""native_ext.load: the built extension, or None where it was not built (the caller then runs Python)."""

from __future__ import annotations

import importlib

from lousho.observe.decode import native_ext


def test_load_gives_the_built_extension() -> None:
    assert native_ext.load("_otlp_native") is importlib.import_module("lousho.observe.decode._otlp_native")


def test_load_gives_none_for_an_extension_not_built() -> None:
    assert native_ext.load("_otlp_missing") is None
