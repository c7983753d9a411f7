"""Print frames for people (a table) or programs (JSON, CSV).

rich loads only for a table: ``--json`` and ``--csv`` do not pay for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from lousho.observe.sql.sql_csv import cell, csv_text

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from lousho.observe.client.store_client import SqlAnswer


def print_frame(frame: pl.DataFrame, fmt: str = "table", title: str | None = None) -> None:
    """JSON and CSV keep every byte (they are for programs); the table shows each cell and column name
    through ``safe_text``, so stored text can neither inject markup nor drive the terminal."""
    if fmt == "json":
        click.echo(frame.write_json() if frame.height else "[]")
    elif fmt == "csv":
        # color=True: click would otherwise strip CSI sequences from a pipe, silently changing the data.
        click.echo(frame.write_csv(), nl=False, color=True)
    else:
        from rich.table import Table

        from lousho.kernel.cli_support import table_console
        from lousho.kernel.text_safety import safe_text, visible

        console = table_console()
        table = Table(title=safe_text(title, "table.title") if title is not None else None, show_lines=False)
        for name in frame.columns:
            table.add_column(safe_text(name), overflow="fold")
        for row in frame.iter_rows():
            table.add_row(*(safe_text("" if v is None else _short(visible(v))) for v in row))
        console.print(table)
        console.print(f"{frame.height} row{'s' if frame.height != 1 else ''}")


def print_table(table: pa.Table, fmt: str = "table") -> None:
    """Print any SQL result, whatever its column types or names, through its JSON form (``sql_json``):
    ``json`` an array of row objects (repeated names get ``_2``... keys), ``csv`` a header with the
    names as given and nested values as JSON text, ``table`` a rich table."""
    from lousho.observe.sql.sql_json import rows_json, table_rows

    columns = table.column_names
    if fmt == "json":
        click.echo(rows_json(table))
    elif fmt == "csv":
        out = click.get_text_stream("stdout")
        out.write(csv_text(table))
        out.flush()
    else:
        _print_rows(columns, table_rows(table))


def print_answer(answer: SqlAnswer, fmt: str = "table") -> None:
    """Print the daemon's JSON answer to a query (``json`` or ``table``) as ``print_table`` prints the result
    it maps (its values are already in their JSON form), without loading pyarrow. CSV from the daemon is its own
    answer (``sql_csv``), printed as it comes."""
    if fmt == "json":
        click.echo(json.dumps(answer.rows, ensure_ascii=False, allow_nan=False, separators=(",", ":")))
        return
    _print_rows(answer.columns, [[row[key] for key in answer.keys] for row in answer.rows])


def _print_rows(columns: Sequence[str], rows: list[list[Any]]) -> None:
    from rich.table import Table

    from lousho.kernel.cli_support import table_console
    from lousho.kernel.text_safety import safe_text, visible

    console = table_console()
    view = Table(show_lines=False)
    for name in columns:
        view.add_column(safe_text(name), overflow="fold")
    for row in rows:
        view.add_row(*(safe_text(_short(visible(cell(v)))) for v in row))
    console.print(view)
    console.print(f"{len(rows)} row{'s' if len(rows) != 1 else ''}")


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
