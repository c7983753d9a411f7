"""Tell a damaged or foreign store file from a transient failure, and check a store's blocks.

What DuckDB 2.0.1 notices, and when (measured on stores truncated to half or with 4 KiB of garbage
written at many offsets):

- opening reads the file headers and the catalog: a garbled header is "not a valid DuckDB database
  file"; a truncated file or damaged table data opens without complaint, and so do the migrations.
- table data is checked (each 256 KiB block carries a checksum) only when a query reads the block:
  "Corrupt database file: computed checksum ..." or, past a truncation, "Could not read enough
  bytes". ``verify_tables`` reads every column of every table once, so each data block is checked.
- the primary-key indexes are loaded lazily, one node at a time; no read-only query touches all of
  them. Damage there shows up at the first commit whose key crosses a damaged node, after which
  DuckDB invalidates the database. ``is_corruption`` recognises those errors, so the daemon goes
  unhealthy instead of answering "retry" forever.

A full disk is not damage, though DuckDB reports part of it as fatal (measured, DuckDB 2.0.1 on a full
tmpfs): a commit fails with TransactionException "Failed to commit: Could not write file "<db>.wal": No
space left on device" and the database stays usable; a CHECKPOINT fails with FatalException "Failed to
create checkpoint because of error: Could not write file "<db>": No space left on device" and DuckDB then
refuses every statement ("database has been invalidated ... Original error: ..."). The file and its WAL
are intact: opening it again (in the same process too) replays the WAL, on a full disk as well.
``is_disk_full`` recognises all of these, and ``is_corruption`` never counts them.
"""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

import duckdb

from lousho.observe.errors import (
    ObserveError,
    StoreCorrupt,
    StoreDiskFull,
    StoreLocked,
    StoreNotDuckDB,
    StoreOpenFailed,
    StoreUnwritable,
)

# Phrases of DuckDB's messages (src/storage/, src/main/database.cpp) that mean the file is damaged
# or the database was invalidated by an earlier failure; none of them goes away on retry.
_CORRUPTION = (
    "corrupt database file",
    "could not read enough bytes",
    "database has been invalidated",
    "not a valid duckdb database file",
)
_SQLITE_MAGIC = b"SQLite format 3\0"
# strerror(ENOSPC) and strerror(EDQUOT), as DuckDB's file system quotes them: "Could not write file ...: <reason>".
_DISK_FULL = ("no space left on device", "disk quota exceeded")


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` means the store's file system had no room (retryable: nothing is damaged)."""
    if isinstance(error, StoreDiskFull):
        return True
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return _duckdb_says(error, _DISK_FULL)


def free_bytes(path: Path) -> int:
    """Room left on the file system holding the file ``path`` (0 when it cannot be read)."""
    try:
        return shutil.disk_usage(path.parent).free
    except OSError:
        return 0


def disk_full(path: Path, error: BaseException) -> StoreDiskFull:
    return StoreDiskFull(f"the disk holding the store {path} is full: {_first_line(error)}")


# DuckDB's words for an allocation refused: the daemon's process at its memory cap (memory_cap.py), or the machine
# out of memory. In a FatalException's text too: a checkpoint that could not allocate invalidates the database.
_OUT_OF_MEMORY = ("bad allocation", "allocation failure", "failed to allocate", "out of memory")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` means memory was refused (retryable once others free theirs: nothing is damaged)."""
    return isinstance(error, MemoryError | duckdb.OutOfMemoryException) or _duckdb_says(error, _OUT_OF_MEMORY)


def is_corruption(error: BaseException) -> bool:
    """Whether ``error`` means the store is damaged (never transient: retrying cannot help)."""
    if is_disk_full(error) or is_out_of_memory(error):
        return False  # DuckDB invalidates the database on a checkpoint that found no room or memory: not damage
    return isinstance(error, StoreCorrupt | duckdb.FatalException) or _duckdb_says(error, _CORRUPTION)


def _duckdb_says(error: BaseException, phrases: tuple[str, ...]) -> bool:
    """Whether ``error`` is DuckDB's and its text holds one of ``phrases`` (lower case)."""
    if not isinstance(error, duckdb.Error):
        return False
    text = str(error).lower()
    return any(phrase in text for phrase in phrases)


def corrupt(path: Path, error: BaseException) -> StoreCorrupt:
    return StoreCorrupt(
        f"the store {path} is damaged: {_first_line(error)}",
        hint=f"move {path} aside (or restore a backup) and start again; a new store is created",
    )


def refuse_other_kinds(path: Path) -> None:
    """Refuse a file that is plainly not DuckDB before DuckDB tries to load an extension for it."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError as e:
        raise StoreUnwritable(f"cannot read the store {path}: {e.strerror}") from None
    if head == _SQLITE_MAGIC:
        raise StoreNotDuckDB(f"{path} is a SQLite database, not a DuckDB store")
    if len(head) == 0:
        raise StoreNotDuckDB(f"{path} is an empty file, not a DuckDB store")


def open_error(path: Path, error: duckdb.Error) -> ObserveError:
    """The coded error for a failed ``duckdb.connect`` on ``path``."""
    text = str(error)
    low = text.lower()
    if "could not set lock" in low or "conflicting lock" in low:
        holder = re.search(r"\(PID (\d+)\)", text)
        who = f"process {holder.group(1)}" if holder else "another process"
        return StoreLocked(f"the store {path} is open for writing in {who}")
    if "not a valid duckdb database file" in low:
        return StoreNotDuckDB(
            f"{path} is not a DuckDB store (or its header is damaged)",
            hint=f"pass the path of a lousho store or a new path; if {path} was a store, "
                 "move it aside or restore a backup",
        )
    if is_disk_full(error):
        return disk_full(path, error)
    if is_corruption(error):
        return corrupt(path, error)
    if "permission denied" in low or "read-only file system" in low:
        return StoreUnwritable(f"cannot open the store {path}: {_first_line(error)}")
    return StoreOpenFailed(f"cannot open the store {path}: {_first_line(error)}")


def verify_tables(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Read every column of every table, so DuckDB checks every data block's checksum.

    Raises StoreCorrupt naming the table. Cost: one sequential scan of the file (see docs/observe.md
    for the figure on a million spans).
    """
    tables = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' ORDER BY table_name").fetchall()]
    for table in tables:
        try:
            # hash() of every value: no column can be skipped, no segment answered from statistics.
            con.execute(f'SELECT sum(hash(COLUMNS(*))) FROM "{table}"').fetchall()
        except duckdb.Error as e:
            if not is_corruption(e):
                raise
            raise corrupt(path, e) from None


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
