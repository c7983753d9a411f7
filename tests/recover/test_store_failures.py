"""A database that refuses a statement for a reason of its own (a corrupt SQLite file, a read-only Postgres) gives a
coded LOUSHO_STORE_FAILED error with a hint, through the real CLI as from the library, never a driver traceback, and
writes nothing."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from pg_support import PgServer

from lousho.recover import durable
from lousho.recover.errors import StoreFailed
from lousho.recover.store import open as open_store


def _corrupt_data_pages(path: Path) -> None:
    """Overwrite the start of every third page past the first 40 (the schema's pages stay readable)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(path.read_bytes())
    for offset in range(4096 * 40, len(data) - 4096, 4096 * 3):
        data[offset:offset + 100] = b"\xff" * 100
    path.write_bytes(data)


def test_a_corrupt_sqlite_store_is_a_coded_error_in_the_cli_not_a_traceback(tmp_path: Path):
    path = tmp_path / "runs.db"
    store = open_store(f"sqlite:///{path}")
    for i in range(50):
        run = durable.start(store, f"r{i}", "coder", "send", {"text": "y" * 3000})
        run.step("chat", lambda: "z" * 3000)
    store.close()
    _corrupt_data_pages(path)

    shown = subprocess.run([sys.executable, "-m", "lousho", "runs", "pending", "--store", f"sqlite:///{path}"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert shown.returncode == 1, shown.stderr
    assert "Traceback" not in shown.stderr
    assert "error LOUSHO_STORE_FAILED" in shown.stderr and "malformed" in shown.stderr
    assert "hint: check" in shown.stderr and "integrity_check" in shown.stderr


@pytest.mark.system
def test_a_read_only_postgres_refuses_a_write_with_a_coded_retryable_error_and_writes_nothing(pg_server: PgServer):
    with pg_server.fresh_schema() as url:
        writer = open_store(url)
        read_only = url + urllib.parse.quote(" -c default_transaction_read_only=on")  # url ends in options=...
        reader = open_store(read_only)
        try:
            with pytest.raises(StoreFailed) as refused:
                reader.create_run("r1", agent="coder", kind="send", input={"text": "hi"})
            assert refused.value.code == "LOUSHO_STORE_FAILED" and refused.value.retryable
            assert refused.value.sqlstate == "25006"  # read_only_sql_transaction
            assert "read-only" in refused.value.message and "writable" in refused.value.hint
            assert writer.get_run("r1") is None
        finally:
            reader.close()
            writer.close()
