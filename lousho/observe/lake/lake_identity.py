"""The lake name a store ships under, kept in the store itself (``lousho_lake_identity``, a local migration).

A daemon started without ``--lake-name`` ships under the recorded name, not a new host's default: a container
recreated on its old volume would otherwise send every row again under a new name.
"""

from __future__ import annotations

import duckdb


def lake_name(con: duckdb.DuckDBPyConnection) -> str | None:
    """The lake name this store ships under (None: it never shipped)."""
    row = con.execute("SELECT any_value(lake_name) FROM lousho_lake_identity").fetchone()
    return row[0] if row else None


def record_lake_name(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Keep ``name`` as the one lake name of this store."""
    con.execute("BEGIN")
    try:
        con.execute("DELETE FROM lousho_lake_identity")
        con.execute("INSERT INTO lousho_lake_identity VALUES (?)", [name])
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # deliberate: the write's own error is the one to report
        raise
