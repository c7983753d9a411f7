"""``lousho bench``: the benchmarks that ship with the package."""

from __future__ import annotations

import click

from lousho.bench.heal.cli import heal


@click.group()
def bench() -> None:
    """Benchmarks that ship with lousho."""


bench.add_command(heal)
