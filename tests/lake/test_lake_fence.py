"""The fences of a lake query: nothing but the lake's tables, read. The lake's DuckDB has extensions lousho's has not
(postgres_scan, postgres_query, ducklake_*) and the catalog's Postgres attached beside the lake; a query may reach
neither, and the catalog's password goes to the catalog's server alone."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from lousho.observe.errors import LakeUnavailable, ObserveError, SqlFailed, SqlOutOfMemory, SqlRefused
from lousho.observe.lake.lake_client import (
    QUERY_GRACE_S,
    LakeClient,
    LakeTarget,
    catalog_params,
    lake_python,
    libpq_dsn,
)
from lousho.observe.lake.lake_query import LakeReader

pytestmark = [pytest.mark.system, pytest.mark.slow]


class FakePostgres:
    """A server that speaks Postgres' startup far enough to ask for a cleartext password, and records any
    password message a client sends."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.passwords: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                con, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            try:
                con.settimeout(5)
                self._startup(con)
            except (OSError, struct.error):
                pass
            finally:
                con.close()

    def _startup(self, con: socket.socket) -> None:
        body = _message(con, typed=False)
        if struct.unpack("!I", body[:4])[0] in (80877103, 80877104):  # SSL or GSS request: no
            con.sendall(b"N")
            _message(con, typed=False)
        con.sendall(b"R" + struct.pack("!II", 8, 3))  # AuthenticationCleartextPassword
        kind = con.recv(1)
        if kind == b"p":
            self.passwords.append(_message(con, typed=True))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def _message(con: socket.socket, typed: bool) -> bytes:
    (length,) = struct.unpack("!I", _exactly(con, 4))
    return _exactly(con, length - 4)


def _exactly(con: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = con.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


@pytest.fixture
def fake_pg() -> Iterator[FakePostgres]:
    server = FakePostgres()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def lake(tmp_path: Path, lake_url: str) -> LakeTarget:
    target = LakeTarget(lake_url, str(tmp_path / "lake-data"))
    with LakeClient(target) as writer:
        writer.migrate()
    return target


def _attacks(fake_port: int, dbname: str) -> list[str]:
    return [
        f"SELECT * FROM postgres_scan('host=127.0.0.1 port={fake_port} dbname=x user=postgres', 'public', 't')",
        "SELECT * FROM postgres_query('__ducklake_metadata_lake', 'SELECT pg_read_file(''/etc/hostname'')')",
        f"SELECT * FROM postgres_attach('host=127.0.0.1 port={fake_port} dbname={dbname}')",
        "SELECT * FROM ducklake_snapshots('lake')",
        "SELECT * FROM ducklake_table_info('lake')",
        "SELECT rolpassword FROM __ducklake_metadata_lake.pg_catalog.pg_authid",
        'SELECT * FROM "__ducklake_metadata_lake".ducklake_snapshot',
        "SELECT * FROM __DUCKLAKE_METADATA_LAKE.public.ducklake_table",
        "SELECT (SELECT count(*) FROM __ducklake_metadata_lake.public.ducklake_schema) AS n",
        "WITH x AS (SELECT * FROM __ducklake_metadata_lake.ducklake_metadata) SELECT * FROM x",
        "SELECT pg_clear_cache()",
        "SELECT * FROM histogram_values('__ducklake_metadata_lake.pg_catalog.pg_authid', rolpassword)",
        "SELECT * FROM histogram('__ducklake_' || 'metadata_lake.pg_catalog.pg_authid', rolpassword)",
        "SELECT * FROM pragma_storage_info('__ducklake_metadata_lake.public.ducklake_snapshot')",
    ]


def test_a_lake_query_reaches_neither_the_catalogs_postgres_nor_the_lakes_extensions(lake, lake_url, fake_pg):
    reader = LakeReader(lake, processes=1)
    try:
        for query in _attacks(fake_pg.port, lake_url.rsplit("/", 1)[1]):
            with pytest.raises(SqlRefused) as refused:
                reader.run(query, None, timeout=20)
            assert refused.value.code == "LOUSHO_SQL_REFUSED", query
        assert fake_pg.connections == 0
        # The lake's own tables still read, named plainly or through the lake's catalog.
        assert reader.run("SELECT count(*) AS n FROM spans", None, timeout=20).table.to_pylist() == [{"n": 0}]
        assert reader.run("SELECT count(*) AS n FROM lake.main.spans", None, timeout=20).table.num_rows == 1
        assert reader.run("SELECT count(*) AS n FROM duckdb_tables()", None, timeout=20).table.num_rows == 1
    finally:
        reader.close()


def test_the_lakes_process_gives_the_password_to_the_catalog_alone(lake, lake_url, fake_pg):
    password = lake_url.split(":")[2].split("@")[0]
    client = LakeClient(lake, read_only=True)
    try:
        environ = dict(item.split("=", 1) for item in
                       Path(f"/proc/{client._proc.pid}/environ").read_text().split("\0") if "=" in item)
        assert "PGPASSWORD" not in environ and password not in "".join(environ.values())
        passfile = Path(environ["PGPASSFILE"])
        assert passfile.stat().st_mode & 0o777 == 0o600 and passfile.parent.stat().st_mode & 0o777 == 0o700
        # A libpq connection from the lake's environment to another server (the same database and user, only the
        # port differs) is asked for a password and has none to give.
        probe = ("import duckdb, sys; sys.path.insert(0, sys.argv[1]); from lake_worker import extension_path\n"
                 "con = duckdb.connect(config={'autoload_known_extensions': False})\n"
                 "con.execute(f\"LOAD '{extension_path('postgres_scanner')}'\")\n"
                 "try:\n"
                 "    con.execute(f\"SELECT * FROM postgres_scan('{sys.argv[2]}', 'public', 't')\")\n"
                 "except duckdb.Error as e:\n"
                 "    print(e)\n")
        dbname = lake_url.rsplit("/", 1)[1]
        worker_dir = str(Path(__import__("lousho.observe.lake.lake_worker", fromlist=["x"]).__file__).parent)
        done = subprocess.run([lake_python(), "-I", "-c", probe, worker_dir,
                               f"host=127.0.0.1 port={fake_pg.port} dbname={dbname} user=postgres"],
                              env=environ, capture_output=True, text=True, timeout=60)
        assert fake_pg.connections >= 1, done.stdout + done.stderr
        assert fake_pg.passwords == [], "the password went to a server that is not the catalog"
        # The catalog itself is still reached with it.
        assert client.query("SELECT count(*) AS n FROM spans")[0].to_pylist() == [{"n": 0}]
    finally:
        client.close()
    assert not passfile.exists() and not passfile.parent.exists()
    assert os.environ.get("PGPASSFILE") != str(passfile)


def test_the_catalog_urls_options_and_encoded_names_reach_the_lakes_process():
    url = ("postgresql://u%40x:p%3Aw@db.example:6432/my%20lake?sslmode=verify-full&sslrootcert=/etc/ca%20s.pem"
           "&options=-c%20statement_timeout%3D5s&application_name=it%27s")
    params, password = catalog_params(url)
    assert password == "p:w" and "password" not in libpq_dsn(params)
    assert conninfo_to_dict(libpq_dsn(params)) == {
        "user": "u@x", "host": "db.example", "port": "6432", "dbname": "my lake", "sslmode": "verify-full",
        "sslrootcert": "/etc/ca s.pem", "options": "-c statement_timeout=5s", "application_name": "it's",
        **{k: v for k, v in params.items() if k.startswith(("keepalives", "connect_timeout"))}}
    attach, passfile = LakeTarget(url, "/tmp/x").attach()
    assert attach == f"ducklake:postgres:{libpq_dsn(params)}" and passfile == "db.example:6432:my lake:u@x:p\\:w\n"


def test_a_catalog_with_an_encoded_name_and_options_is_reached_with_them(tmp_path, pg_lake_server):
    name = "lake db's"
    with pg_lake_server.admin() as con:
        con.execute(f'DROP DATABASE IF EXISTS "{name}"')
        con.execute(f'CREATE DATABASE "{name}"')
    url = (pg_lake_server.url(urllib.parse.quote(name)) + "?sslmode=disable&application_name=lousho%20lake%20test")
    target = LakeTarget(url, str(tmp_path / "lake-data"))
    with LakeClient(target) as writer:
        assert writer.migrate() >= 1
        with pg_lake_server.admin() as con:
            names = {row[0] for row in con.execute("SELECT application_name FROM pg_stat_activity WHERE datname = %s",
                                                    [name]).fetchall()}
        assert "lousho lake test" in names
    with LakeClient(target, read_only=True) as reader:
        assert reader.query("SELECT count(*) AS n FROM spans")[0].to_pylist() == [{"n": 0}]


def _postgres_pids(server) -> list[int]:
    postmaster = int((server.datadir / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(postmaster)], capture_output=True, text=True)
    return [postmaster, *(int(p) for p in children.stdout.split())]


def test_a_lake_query_on_a_frozen_catalog_ends_in_its_time_limit_and_the_next_one_works(lake, pg_lake_server):
    reader = LakeReader(lake, processes=1)
    outcome: dict[str, object] = {}

    def frozen_query() -> None:
        started = time.monotonic()
        try:
            outcome["result"] = reader.run("SELECT count(*) AS n FROM spans", None, timeout=3)
        except ObserveError as e:
            outcome["error"] = e
        outcome["seconds"] = time.monotonic() - started

    try:
        assert reader.run("SELECT count(*) AS n FROM spans", None, timeout=20).table.num_rows == 1
        stopped = _postgres_pids(pg_lake_server)
        try:
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            thread = threading.Thread(target=frozen_query, daemon=True)
            thread.start()
            thread.join(20)
            assert not thread.is_alive(), "the query still waits on the frozen catalog"
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        error = outcome.get("error")
        assert isinstance(error, LakeUnavailable | SqlFailed), outcome
        assert error.code in ("LOUSHO_LAKE_UNAVAILABLE", "LOUSHO_SQL_FAILED")
        assert outcome["seconds"] < 3 + QUERY_GRACE_S + 1.5, outcome
        # The slot is free again and the next query, on a new process, answers.
        assert reader.run("SELECT count(*) AS n FROM spans", None, timeout=20).table.to_pylist() == [{"n": 0}]
    finally:
        reader.close()


def test_a_querys_own_error_naming_a_connection_is_its_failure_not_an_outage(lake):
    reader = LakeReader(lake, processes=1)
    try:
        reader.run("SELECT 1 AS x", None, timeout=20)
        (client,) = reader._idle
        for _ in range(2):
            with pytest.raises(SqlFailed) as failed:
                reader.run("SELECT error('no connection') AS x", None, timeout=20)
            assert failed.value.code == "LOUSHO_SQL_FAILED" and "no connection" in failed.value.message
            assert reader._idle == [client] and client.usable  # the same process, not restarted
    finally:
        reader.close()


def test_a_lake_answer_is_bounded_like_a_local_one(lake):
    reader = LakeReader(lake, processes=1, memory_limit="1GB")
    try:
        with pytest.raises(SqlOutOfMemory) as refused:
            reader.run("SELECT repeat('x', 1000000) AS s FROM range(400)", None, timeout=30,
                       max_answer_bytes=16 * 2**20)
        assert refused.value.code == "LOUSHO_SQL_OUT_OF_MEMORY" and "16 MiB" in refused.value.message
        (client,) = reader._idle
        assert client.usable  # the process stays, for the next query
        small = reader.run("SELECT repeat('x', 1000) AS s FROM range(400)", None, timeout=30,
                           max_answer_bytes=16 * 2**20)
        assert small.table.num_rows == 400
        limit = reader.run("SELECT current_setting('memory_limit') AS m", None, timeout=30).table.to_pylist()
        assert limit[0]["m"].replace(" ", "") in ("953.6MiB", "1.0GB", "1000.0MB"), limit
    finally:
        reader.close()
