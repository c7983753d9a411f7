"""Every way the daemon, `lousho sql` and `lousho runs` can fail to start prints one coded line and
a hint and exits 1: never a traceback."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path

import pytest
from coded_errors import assert_coded, lousho, start_fails

from lousho.observe.client.process import start_daemon


@pytest.mark.system
@pytest.mark.slow
def test_a_store_a_daemon_owns_is_refused_by_a_second_daemon_and_by_sql_and_runs(tmp_path):
    db = tmp_path / "observe.duckdb"
    daemon = start_daemon(db)
    try:
        assert_coded(start_fails(db), "LOUSHO_STORE_LOCKED", "use --url")
        assert_coded(lousho("sql", "--db", str(db), "SELECT 1"), "LOUSHO_STORE_LOCKED", "use --url http://")
        assert_coded(lousho("runs", "--db", str(db)), "LOUSHO_STORE_LOCKED", "use --url http://")
    finally:
        assert daemon.stop() == 0


def _text(path: Path) -> None:
    path.write_text("not a database\n")


def _sqlite(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()


def _empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.system
@pytest.mark.parametrize("make", [_text, _sqlite, _empty], ids=["text", "sqlite", "empty"])
def test_a_file_that_is_not_a_duckdb_store_is_refused(tmp_path, make):
    db = tmp_path / "observe.duckdb"
    make(db)
    before = db.read_bytes()
    assert_coded(start_fails(db), "LOUSHO_STORE_NOT_DUCKDB", "store")
    assert_coded(lousho("sql", "--db", str(db), "SELECT 1"), "LOUSHO_STORE_NOT_DUCKDB", "store")
    assert db.read_bytes() == before


@pytest.mark.system
def test_another_programs_duckdb_file_is_refused_untouched(tmp_path):
    import duckdb

    db = tmp_path / "analytics.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE sales AS SELECT 1 AS amount")
    before = db.read_bytes()
    assert_coded(start_fails(db), "LOUSHO_STORE_NOT_LOUSHO", "new file")  # it added 14 tables of ours
    assert_coded(lousho("runs", "--db", str(db)), "LOUSHO_STORE_NOT_LOUSHO", "new file")
    assert db.read_bytes() == before


@pytest.mark.system
@pytest.mark.parametrize("where", ["under_a_file", "in_sys"])
def test_a_directory_that_cannot_be_created_is_refused(tmp_path, where):
    if where == "under_a_file":
        (tmp_path / "plain").write_text("x")
        db = tmp_path / "plain" / "sub" / "observe.duckdb"
    else:
        # Not creatable even by root: sysfs refuses new directories.
        db = Path("/sys/lousho-test-dir/observe.duckdb")
    assert_coded(start_fails(db), "LOUSHO_STORE_UNWRITABLE", "directory")


@pytest.mark.system
@pytest.mark.parametrize("which", ["--port", "--grpc-port"])
def test_a_busy_port_is_refused(tmp_path, which):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        port = str(holder.getsockname()[1])
        ports = {"--port": "0", "--grpc-port": "0", which: port}
        result = start_fails(tmp_path / "o.duckdb", "--port", ports["--port"], "--grpc-port", ports["--grpc-port"])
    finally:
        holder.close()
    assert_coded(result, "LOUSHO_OBSERVE_PORT_IN_USE", which)
    assert port in result.stderr


@pytest.mark.system
def test_a_damaged_store_read_directly_is_a_coded_error(tmp_path):
    db = tmp_path / "observe.duckdb"
    db.write_bytes(b"\xab" * 100_000)
    assert_coded(lousho("sql", "--db", str(db), "SELECT 1"), "LOUSHO_STORE_NOT_DUCKDB", "backup")
