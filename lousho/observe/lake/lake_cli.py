"""``lousho lake``: the fleet's lake from the command line; ``setup`` builds the lake's own environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from lousho.observe.lake.lake_client import DEFAULT_VENV, PYTHON_ENV

REQUIREMENTS = Path(__file__).with_name("requirements.txt")


@click.group()
def lake() -> None:
    """The fleet's DuckLake (docs/observe.md, "The fleet")."""


@lake.command()
@click.option("--venv", type=click.Path(path_type=Path), default=DEFAULT_VENV, show_default=True,
              help="Where to build the lake's environment.")
def setup(venv: Path) -> None:
    """Build the lake's environment: DuckDB 1.5.5 with DuckLake and its Postgres catalog, beside lousho's.

    DuckLake's extensions are on PyPI only for DuckDB 1.5.5, which lousho's own DuckDB 2 cannot load; the daemon
    runs the lake in a process of this environment. Packages come from PyPI (or your pip's index)."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)
    click.echo(f"the lake's environment: {venv}; lousho finds it there (or set {PYTHON_ENV}={python})")
