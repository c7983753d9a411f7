"""The lake's own process: DuckDB 1.5 with the DuckLake and Postgres extensions, driven over stdin/stdout.

DuckLake's extensions exist on PyPI only for DuckDB 1.5.5, and lousho's store runs on DuckDB 2 (which cannot
load them), so the lake is written and read by this small program in an environment of its own (``make
lake-venv``, or ``lousho lake setup``). It imports nothing of lousho: only the standard library, ``duckdb`` and
``pyarrow``. The daemon (``lake_client.LakeClient``) sends requests and reads one answer for each.

A frame is a 4-byte length and a JSON header, then a 4-byte length and a payload (Arrow IPC stream bytes, or
empty). Requests: ``open`` (attach the lake; read-only for queries), ``migrate`` (statements of one schema
version, in one transaction), ``position`` (a daemon's last committed position), ``commit`` (tables of rows
and the position they reach, in one transaction), ``query`` (one statement, an Arrow answer), ``upkeep``.
An answer is ``{"ok": true, ...}`` or ``{"ok": false, "error": ..., "kind": ...}``.

A query connection has the lake attached read-only, every other file and the network shut off
(``enable_external_access`` false but for the lake's data directory) and its configuration locked; the catalog's
password comes from a libpq passfile for the catalog alone (``PGPASSFILE``), never from the connection string a
query can read. The daemon refuses, before a query reaches this process, every function of its extensions and any
database but the lake (``fence`` lists them for that check).
"""

from __future__ import annotations

import glob
import json
import os
import select
import signal
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import pyarrow as pa

_LENGTH = struct.Struct("<I")
EXTENSIONS = ("postgres_scanner", "ducklake")
# Crash tests: ``LOUSHO_OBSERVE_FAULT=lake.<point>:<n>`` kills the daemon (this process's parent) and this process
# the n-th time a point is reached: ``lake.committing`` with the transaction's rows written but not committed,
# ``lake.committed`` after the commit and before the answer. ``lake.query:<n>:internal`` instead fails the n-th query
# of a read-only process as an internal error of DuckDB's fails it: InternalException, and every later statement
# FatalException, the database invalidated (seen with DuckDB 1.5.5 on the lake's ``runs``, once in a few dozen runs).
FAULT_ENV = "LOUSHO_OBSERVE_FAULT"
# A test that forces two commits to meet names a file: before committing, each worker creates
# ``<file>.<pid>`` and waits (up to 30 s) for ``<file>`` itself to exist.
HOLD_ENV = "LOUSHO_LAKE_HOLD"


def extension_path(name: str) -> str:
    """The extension's file inside its PyPI wheel (duckdb-extension-<name>), for ``LOAD '<path>'``."""
    for entry in sys.path:
        found = glob.glob(os.path.join(entry, f"duckdb_extension_{name}", "extensions", "*",
                                       f"{name}.duckdb_extension"))
        if found:
            return found[0]
    raise FileNotFoundError(f"the DuckDB extension {name} is not installed in {sys.prefix} "
                            f"(pip install duckdb-extension-{name.replace('_', '-')}=={duckdb.__version__})")


class Lake:
    def __init__(self, catalog: str, data_path: str, read_only: bool, memory_limit: str | None,
                 temp_directory: str | None = None) -> None:
        # Never fetch an extension at run time: both are loaded from their wheels' files.
        config: dict[str, Any] = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
        if temp_directory:
            # SQL may read DuckDB's temporary directory even with external access off, and an in-memory
            # instance's is ``.tmp`` in the working directory: the client's private one holds only our spills.
            config["temp_directory"] = temp_directory
        if memory_limit:
            config["memory_limit"] = memory_limit
        self.con = duckdb.connect(config=config)
        self._invalidated = False  # by the fault point lake.query (``_fault``) only
        for name in EXTENSIONS:
            self.con.execute(f"LOAD '{extension_path(name)}'")
        options = [f"DATA_PATH '{_quote(data_path)}'"] + (["READ_ONLY"] if read_only else [])
        self.con.execute(f"ATTACH '{_quote(catalog)}' AS lake ({', '.join(options)})")
        self.con.execute("USE lake")
        self.read_only = read_only
        if read_only:
            data = str(Path(data_path).resolve())
            self.con.execute(f"SET allowed_directories = ['{_quote(data)}/']")
            self.con.execute("SET enable_external_access = false")
            self.con.execute("SET lock_configuration = true")

    def version(self) -> int:
        if not self._has("lousho_lake_schema"):
            return 0
        return int(self.con.execute("SELECT coalesce(max(version), 0) FROM lousho_lake_schema").fetchone()[0])

    def _has(self, table: str) -> bool:
        return bool(self.con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'lake' "
                                     "AND table_name = ?", [table]).fetchone()[0])

    def migrate(self, migrations: list[dict[str, Any]]) -> int:
        """Apply each migration the lake lacks, in its own transaction; two daemons starting together both
        try, and the one that loses DuckLake's conflict finds the version applied on its retry."""
        for attempt in range(5):
            try:
                for number, migration in enumerate(migrations, start=1):
                    if number <= self.version():
                        continue
                    self.con.execute("BEGIN")
                    try:
                        for statement in migration["statements"]:
                            self.con.execute(statement)
                        self.con.execute("INSERT INTO lousho_lake_schema VALUES (?, ?, ?)",
                                         [number, migration["description"], time.time_ns()])
                        self.con.execute("COMMIT")
                    except BaseException:
                        self.con.execute("ROLLBACK")
                        raise
                return self.version()
            except duckdb.TransactionException:
                time.sleep(0.2 * (attempt + 1))
        return self.version()

    def position(self, daemon: str) -> int:
        row = self.con.execute("SELECT coalesce(max(position), 0) FROM lousho_lake_positions WHERE daemon = ?",
                               [daemon]).fetchone()
        return int(row[0])

    def commit(self, header: dict[str, Any], tables: dict[str, pa.Table]) -> int:
        """Insert every table's rows and the daemon's new position in one transaction: the position is in the
        lake exactly when its rows are. A batch at or below the recorded position was committed before (its
        answer lost to a crash) and is not inserted again."""
        daemon, after, position = header["daemon"], int(header["after"]), int(header["position"])
        held = self.position(daemon)
        if position <= held:
            return 0
        if after != held:
            # Rows from before the lake's position (a commit whose answer its sender lost) would go in twice.
            raise ValueError(f"the batch of {daemon} starts after {after}, but the lake holds it up to {held}: "
                             "read the position again")
        rows = 0
        self.con.execute("BEGIN")
        try:
            for name, statement in header["inserts"]:
                table = tables.get(name)
                if table is None or not table.num_rows:
                    continue
                self.con.register(name, table)
                try:
                    self.con.execute(statement)
                finally:
                    self.con.unregister(name)
                rows += table.num_rows if name == "span_batch" else 0
            self.con.execute("INSERT INTO lousho_lake_positions VALUES (?, ?, ?, ?)",
                             [daemon, position, rows, time.time_ns()])
            _fault("lake.committing")
            _hold()
            self.con.execute("COMMIT")
        except BaseException:
            try:
                self.con.execute("ROLLBACK")
            except duckdb.Error:
                pass
            raise
        _fault("lake.committed")
        return rows

    def query(self, sql: str, params: list[Any] | None, timeout_s: float, max_rows: int,
              max_bytes: int | None = None) -> tuple[pa.Table, bool]:
        """One statement's answer, at most ``max_rows`` rows (and whether it was cut), interrupted after
        ``timeout_s``; an answer past ``max_bytes`` of Arrow data is refused (``AnswerTooLarge``). A column Arrow
        cannot carry faithfully (a 128-bit integer: UHUGEINT's top half would wrap) comes as DuckDB's text for it, as
        the local SQL API sends it."""
        if not self.read_only:
            raise ValueError("queries run on a lake opened read-only (its writer's process takes none)")
        if self._invalidated:  # what DuckDB answers once an internal error has invalidated its database
            raise duckdb.FatalException("database has been invalidated because of a previous fatal error")
        if _fault("lake.query") == "internal":
            self._invalidated = True
            raise duckdb.InternalException("fault point lake.query")
        timer = threading.Timer(timeout_s, self.con.interrupt)
        timer.start()
        try:
            relation = self.con.sql(sql, params=params or None)
            if relation is None:
                raise ValueError("not a query")
            wide = {n for n, t in zip(relation.columns, relation.types, strict=True)
                    if str(t) in ("UHUGEINT", "HUGEINT")}
            if wide:
                relation = relation.project(", ".join(
                    f'"{n}"::VARCHAR AS "{n}"' if n in wide else f'"{n}"' for n in relation.columns))
            reader = relation.to_arrow_reader(8192)
            batches, count, size = [], 0, 0
            for batch in reader:
                batches.append(batch)
                count += batch.num_rows
                size += batch.nbytes
                if max_bytes is not None and size > max_bytes:
                    raise AnswerTooLarge(f"the answer passed the {max_bytes // 2**20} MiB one query may hold")
                if count > max_rows:
                    break
            table = pa.Table.from_batches(batches, schema=reader.schema)
        finally:
            timer.cancel()
        truncated = table.num_rows > max_rows
        return (table.slice(0, max_rows) if truncated else table), truncated

    def fence(self) -> dict[str, Any]:
        """What the daemon's statement check must know of this DuckDB (sql_guard.check_lake_read_only): every
        function name with whether it is a table function and whether a scalar of it is volatile or has side
        effects, and the attached databases."""
        functions = self.con.execute("""
            SELECT lower(function_name), bool_or(function_type IN ('table', 'table_macro')),
                   bool_or(function_type NOT IN ('table', 'table_macro', 'pragma')
                           AND (has_side_effects OR stability = 'VOLATILE'))
            FROM duckdb_functions() GROUP BY 1 ORDER BY 1""").fetchall()
        databases = [name for (name,) in self.con.execute("SELECT database_name FROM duckdb_databases()").fetchall()]
        return {"functions": [list(f) for f in functions], "databases": databases}

    def upkeep(self, older_than_s: float) -> dict[str, Any]:
        """DuckLake's own upkeep, in its safe order: merge small files, expire old snapshots, then delete the files
        only those snapshots used. Never ``delete_orphaned_files``: it also takes the files of a transaction
        another daemon has written but not yet committed."""
        removed = self._deduplicate() if self._has("lousho_lake_dedup") else 0
        # Counted through Arrow: the calls answer timestamps with time zones, which Python rows would need pytz for.
        merged = self._rows("CALL ducklake_merge_adjacent_files('lake')")
        since = f"now() - to_microseconds({int(older_than_s * 1e6)})"
        expired = self._rows(f"CALL ducklake_expire_snapshots('lake', older_than => {since})")
        cleaned = self._rows(f"CALL ducklake_cleanup_old_files('lake', older_than => {since})")
        return {"duplicates_removed": removed, "merged": merged, "expired": expired, "deleted_files": cleaned}

    def _deduplicate(self) -> int:
        """Remove the later copies of spans (and their scores) that reached the lake twice: a span an SDK re-sent to
        another daemon of the fleet, or after its twin left the local filter's window. Each run looks at the keys
        of the spans committed since the last run, in the lake's own order (the DuckLake snapshot that inserted
        them: a daemon catching up after an outage commits spans it received hours ago), against the whole table,
        keeps the copy received first, and records the newest snapshot it looked at, in one transaction. A commit
        it does not see gets a later snapshot, so the next run looks at it; a conflict with a commit of the same
        moment rolls it back and the next upkeep tries again."""
        since = self.con.execute("SELECT coalesce(max(checked_snapshot), 0) FROM lousho_lake_dedup").fetchone()[0]
        params = {"since": since}
        self.con.execute("BEGIN")
        try:
            upto, newest = self.con.execute("SELECT coalesce(max(snapshot_id), $since), max(received_ns) "
                                            "FROM span_rows WHERE snapshot_id > $since", params).fetchone()
            recent = "SELECT key_hi, key_lo FROM span_rows WHERE snapshot_id > $since"
            removed = self.con.execute(f"""
                DELETE FROM span_rows WHERE rowid IN (SELECT rowid FROM (
                    SELECT rowid, row_number() OVER (PARTITION BY key_hi, key_lo ORDER BY received_ns, rowid) AS n
                    FROM span_rows WHERE (key_hi, key_lo) IN ({recent})) WHERE n > 1)""", params).fetchone()[0]
            if removed:
                self.con.execute(f"""
                    DELETE FROM score_rows WHERE rowid IN (SELECT rowid FROM (
                        SELECT rowid, row_number() OVER (PARTITION BY key_hi, key_lo, seq ORDER BY rowid) AS n
                        FROM score_rows WHERE (key_hi, key_lo) IN ({recent})) WHERE n > 1)""", params)
            self.con.execute("INSERT INTO lousho_lake_dedup (checked_ns, removed, at_ns, checked_snapshot) "
                             "VALUES (?, ?, ?, ?)", [newest, removed, time.time_ns(), upto])
            self.con.execute("COMMIT")
        except duckdb.TransactionException:
            self.con.execute("ROLLBACK")
            return 0
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        return int(removed)

    def _rows(self, statement: str) -> int:
        return self.con.execute(statement).to_arrow_table().num_rows


class AnswerTooLarge(ValueError):
    """A query's answer passed the bytes the daemon lets one query hold."""


def _quote(text: str) -> str:
    return text.replace("'", "''")


def _fault(name: str) -> str | None:
    """Kill at the point's n-th pass, or return its kind (``internal``) there when the variable names one."""
    point, _, rest = os.environ.get(FAULT_ENV, "").partition(":")
    if point != name:
        return None
    count, _, kind = rest.partition(":")
    _FAULT_SEEN[name] = _FAULT_SEEN.get(name, 0) + 1
    if _FAULT_SEEN[name] != int(count or 1):
        return None
    if kind:
        return kind
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
    return None


_FAULT_SEEN: dict[str, int] = {}


def _hold() -> None:
    path = os.environ.get(HOLD_ENV)
    if not path:
        return
    Path(f"{path}.{os.getpid()}").touch()
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def read_frame(stream: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    header = json.loads(_exactly(stream, _LENGTH.unpack(head)[0]))
    payload = _exactly(stream, _LENGTH.unpack(_exactly(stream, 4))[0])
    return header, payload


def write_frame(stream: BinaryIO, header: dict[str, Any], payload: bytes = b"") -> None:
    encoded = json.dumps(header).encode()
    stream.write(_LENGTH.pack(len(encoded)) + encoded + _LENGTH.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _exactly(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError("the lake's peer closed the stream in a frame")
    return data


def tables_of(payload: bytes) -> dict[str, pa.Table]:
    """The payload of a commit: one Arrow IPC stream per table, each a 4-byte name length, name, 4-byte length."""
    tables, at = {}, 0
    while at < len(payload):
        (n,) = _LENGTH.unpack_from(payload, at)
        name = payload[at + 4:at + 4 + n].decode()
        at += 4 + n
        (size,) = _LENGTH.unpack_from(payload, at)
        at += 4
        tables[name] = pa.ipc.open_stream(payload[at:at + size]).read_all()
        at += size
    return tables


def ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _answer(lake: Lake | None, header: dict[str, Any], payload: bytes) -> tuple[Lake | None, dict[str, Any], bytes]:
    op = header["op"]
    if op == "open":
        lake = Lake(header["catalog"], header["data_path"], header.get("read_only", False),
                    header.get("memory_limit"), header.get("temp_directory"))
        return lake, {"ok": True, "version": lake.version(), "duckdb": duckdb.__version__}, b""
    if lake is None:
        raise RuntimeError("the lake is not open")
    if op == "migrate":
        return lake, {"ok": True, "version": lake.migrate(header["migrations"])}, b""
    if op == "position":
        return lake, {"ok": True, "position": lake.position(header["daemon"])}, b""
    if op == "commit":
        return lake, {"ok": True, "rows": lake.commit(header, tables_of(payload))}, b""
    if op == "query":
        table, truncated = lake.query(header["sql"], header.get("params"), float(header.get("timeout_s", 30)),
                                      int(header.get("max_rows", 1 << 62)), header.get("max_bytes"))
        return lake, {"ok": True, "rows": table.num_rows, "truncated": truncated}, ipc_bytes(table)
    if op == "fence":
        return lake, {"ok": True, **lake.fence()}, b""
    if op == "upkeep":
        return lake, {"ok": True, **lake.upkeep(float(header["older_than_s"]))}, b""
    raise ValueError(f"unknown request {op!r}")


_BUSY = threading.Event()


def _die_with_parent(stdin: BinaryIO) -> None:
    """Never outlive the daemon, nor finish a request it gave up on: a commit an orphan finished after the restarted
    daemon read its position would be in the lake twice. Exits when the parent is gone (this process was handed to
    another parent) or, during a request, when the daemon closed the request stream. Watched from a thread, not
    PR_SET_PDEATHSIG: that fires when the *thread* that started this process ends, and the daemon starts lake
    processes from threads that come and go."""
    parent = os.getppid()
    poller = select.poll() if hasattr(select, "poll") else None
    if poller is not None:
        poller.register(stdin.fileno(), 0)  # POLLHUP and POLLERR are always reported

    def watch() -> None:
        while True:
            time.sleep(0.1)
            if os.getppid() != parent:
                os._exit(1)
            if poller is not None and _BUSY.is_set() and any(
                    event & (select.POLLHUP | select.POLLERR) for _, event in poller.poll(0)):
                os._exit(1)

    threading.Thread(target=watch, name="lake-parent", daemon=True).start()


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames on the answer stream
    _die_with_parent(stdin)
    lake: Lake | None = None
    while (frame := read_frame(stdin)) is not None:
        header, payload = frame
        _BUSY.set()
        try:
            lake, answer, body = _answer(lake, header, payload)
        except (duckdb.Error, OSError, ValueError, RuntimeError, KeyError) as e:
            answer, body = {"ok": False, "error": str(e), "kind": type(e).__name__}, b""
        _BUSY.clear()
        write_frame(stdout, answer, body)


if __name__ == "__main__":
    main()
