"""``lousho lake setup`` builds the lake's environment from the requirements shipped in the package, and a lake
whose catalog is a file (one machine, one writer) works from it with no Postgres."""

from __future__ import annotations

import subprocess
import sys

import pytest
from lake_rows import spans_table

from lousho.observe.lake.lake_client import LakeClient, LakeTarget

pytestmark = [pytest.mark.system, pytest.mark.slow]


def test_setup_builds_an_environment_that_runs_a_lake_on_a_catalog_file(tmp_path):
    venv = tmp_path / "lake-venv"
    out = subprocess.run([sys.executable, "-m", "lousho", "lake", "setup", "--venv", str(venv)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert f"the lake's environment: {venv}" in out.stdout
    python = str(venv / "bin" / "python")
    target = LakeTarget(str(tmp_path / "catalog.ducklake"), str(tmp_path / "data"))
    with LakeClient(target, python=python) as writer:
        writer.migrate()
        spans = spans_table(0, 3)
        assert writer.commit("solo", 0, 1, {"span_batch": spans}) == 3
    with LakeClient(target, read_only=True, python=python) as reader:
        table, _ = reader.query("SELECT span_key, name FROM spans ORDER BY span_key")
    assert table.to_pylist() == [{"span_key": str((1 << 64) | i), "name": "n"} for i in range(3)]
