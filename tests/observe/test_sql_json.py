"""The JSON mapping's fast column-wise path and its value-by-value path give the same answer."""

from __future__ import annotations

import json

import duckdb
import pytest

from lousho.observe.sql.sql_json import _plain_json_column, row_keys, rows_json, table_rows

PLAIN = """
SELECT * FROM (VALUES
    (true, (-9223372036854775807 - 1)::BIGINT, 18446744073709551615::UBIGINT, 'é"\\\n' || chr(8232), 0.1::FLOAT,
     1e300::DOUBLE, 1.50::DECIMAL(4, 2), DATE '0001-01-01', TIMESTAMP '9999-12-31 23:59:59.999999',
     TIMESTAMP_S '1970-01-01 00:00:00', TIMESTAMP_MS '2024-02-29 01:02:03.004',
     TIMESTAMP_NS '1677-09-22 00:00:00.000000001', TIMESTAMPTZ '2024-02-29 01:02:03.000004+00', 1),
    (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 2)
) AS t(b, i, u, s, f, d, dec, dt, ts, ts_s, ts_ms, ts_ns, tz, dup)
"""


def _value_by_value(table) -> list[dict]:
    keys = row_keys(table.column_names)
    return [dict(zip(keys, row, strict=True)) for row in table_rows(table)]


@pytest.mark.parametrize("query", [
    PLAIN,
    "SELECT 1 AS a, 'x' AS a",
    "SELECT 0.0000000001::DECIMAL(38, 10) AS small, 0::DECIMAL(38, 10) AS zero",
    "SELECT range AS n FROM range(0)",
    # Outside years 1..9999, infinite, non-finite: the value-by-value path answers for these.
    "SELECT DATE '-0044-03-15' AS d, 'infinity'::TIMESTAMP AS t, 'nan'::DOUBLE AS f",
])
def test_fast_and_value_by_value_paths_agree(query):
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        table = con.sql(query).to_arrow_table()
    assert json.loads(rows_json(table)) == _value_by_value(table)


def test_plain_columns_take_the_fast_path():
    with duckdb.connect() as con:
        table = con.sql(PLAIN).to_arrow_table()
    assert all(_plain_json_column(column) is not None for column in table.columns)


def test_plain_values_have_their_documented_text():
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        rows = json.loads(rows_json(con.sql(PLAIN).to_arrow_table()))
    first = rows[0]
    assert first["u"] == 18446744073709551615 and first["dec"] == "1.50"
    assert first["dt"] == "0001-01-01" and first["ts"] == "9999-12-31T23:59:59.999999"
    assert first["ts_s"] == "1970-01-01T00:00:00" and first["ts_ms"] == "2024-02-29T01:02:03.004"
    assert first["ts_ns"] == "1677-09-22T00:00:00.000000001" and first["tz"] == "2024-02-29T01:02:03.000004Z"
    assert rows[1]["b"] is None and rows[1]["dup"] == 2
