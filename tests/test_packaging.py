"""pyproject.toml's metadata in the form current setuptools reads without a deprecation warning."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_the_license_is_an_spdx_expression_which_setuptools_77_reads_without_a_deprecation_box() -> None:
    doc = tomllib.loads(PYPROJECT.read_text())
    # A `{ text = ... }` table prints setuptools' "License expression" deprecation box on every install (PEP 639).
    assert doc["project"]["license"] == "Apache-2.0"
    assert not any("License ::" in c for c in doc["project"].get("classifiers", []))
    [setuptools] = [r for r in doc["build-system"]["requires"] if r.startswith("setuptools")]
    assert tuple(int(p) for p in re.search(r">=([\d.]+)", setuptools)[1].split(".")) >= (77,)
