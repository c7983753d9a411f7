"""A SQL result as CSV: a header of the column names as given, then each row's values in their JSON form
(``sql_json``): nested values as JSON text, booleans ``true``/``false``, NULL an empty field.

The daemon writes it for ``Accept: text/csv`` on its SQL worker, so ``lousho sql --url --csv`` prints the bytes
it gets and loads neither pyarrow nor Polars; ``lousho sql --db --csv`` writes the same text in-process.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def csv_text(table: pa.Table, header: bool = True) -> str:
    """The CSV text of ``table``; without ``header``, its rows only (a slice of a longer answer)."""
    from lousho.observe.sql.sql_json import plain_frame, table_rows

    out = io.StringIO()
    if header:
        csv.writer(out, lineterminator="\n").writerow(table.column_names)
    if table.num_rows == 0:
        return out.getvalue()
    plain = plain_frame(table)
    if plain is not None:  # a million plain rows in a second, not ten
        out.write(plain.write_csv(include_header=False))
    else:
        _write_rows(out, table_rows(table))
    return out.getvalue()


def _write_rows(out: IO[str], rows: Iterable[Sequence[Any]]) -> None:
    """Rows of JSON-ready values (``sql_json.table_rows``) as CSV records."""
    csv.writer(out, lineterminator="\n").writerows([cell(v) for v in row] for row in rows)


def cell(value: Any) -> str:
    """One JSON-ready value as the text of a CSV field or a table cell."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
