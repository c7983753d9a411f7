"""Print frames for people (a table) or programs (JSON, CSV)."""

from __future__ import annotations

import sys

import click
import polars as pl
from rich.console import Console
from rich.table import Table

from lousho.observe.safe_text import safe_text, visible


def table_console() -> Console:
    """The console of every table printer: a pipe gets a wide table rather than 80 folded columns, and
    no string is parsed as markup or emoji codes (cells are ``safe_text`` anyway)."""
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False, markup=False, emoji=False)


def print_frame(frame: pl.DataFrame, fmt: str = "table", title: str | None = None) -> None:
    """JSON and CSV keep every byte (they are for programs); the table shows each cell and column name
    through ``safe_text``, so stored text can neither inject markup nor drive the terminal."""
    if fmt == "json":
        click.echo(frame.write_json() if frame.height else "[]")
    elif fmt == "csv":
        # color=True: click would otherwise strip CSI sequences from a pipe, silently changing the data.
        click.echo(frame.write_csv(), nl=False, color=True)
    else:
        console = table_console()
        table = Table(title=safe_text(title, "table.title") if title is not None else None, show_lines=False)
        for name in frame.columns:
            table.add_column(safe_text(name), overflow="fold")
        for row in frame.iter_rows():
            table.add_row(*(safe_text("" if v is None else _short(visible(v))) for v in row))
        console.print(table)
        console.print(f"{frame.height} row{'s' if frame.height != 1 else ''}")


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
