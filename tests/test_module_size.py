"""Small modules with one job each: no source file of the package is over 600 lines (issue 17), C included.

A module that grows past it is split by job (a C extension's sources share one private header)."""

from __future__ import annotations

from pathlib import Path

import lousho

ROOT = Path(lousho.__file__).resolve().parent
LIMIT = 600


def test_no_source_file_of_the_package_is_over_600_lines() -> None:
    sources = [p for suffix in ("*.py", "*.c", "*.h", "*.pyx") for p in ROOT.rglob(suffix)]
    assert len(sources) > 100  # the walk found the package
    too_long = {str(p.relative_to(ROOT)): n for p in sources if (n := len(p.read_text("utf-8").splitlines())) > LIMIT}
    assert too_long == {}
