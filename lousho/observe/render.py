"""Print frames for people (a table) or programs (JSON, CSV)."""

from __future__ import annotations

import sys

import click
import polars as pl
from rich.console import Console
from rich.table import Table


def print_frame(frame: pl.DataFrame, fmt: str = "table", title: str | None = None) -> None:
    if fmt == "json":
        click.echo(frame.write_json() if frame.height else "[]")
    elif fmt == "csv":
        click.echo(frame.write_csv(), nl=False)
    else:
        console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
        table = Table(title=title, show_lines=False)
        for name in frame.columns:
            table.add_column(name, overflow="fold")
        for row in frame.iter_rows():
            table.add_row(*("" if v is None else _short(v) for v in row))
        console.print(table)
        console.print(f"{frame.height} row{'s' if frame.height != 1 else ''}")


def _short(value: object, limit: int = 80) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
