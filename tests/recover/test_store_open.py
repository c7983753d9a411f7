"""Opening a store: URLs, the SQLite settings that make several processes safe, and schema migrations."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from pg_support import free_port
from recover_support import raw_sql, table_names

from lousho.kernel.errors import UsageError
from lousho.recover import schema
from lousho.recover.errors import (
    SchemaTooNew,
    StoreBusy,
    StoreMissing,
    StoreNotRunStore,
    StoreNotSqlite,
    StoreUnavailable,
    UnsupportedStoreUrl,
)
from lousho.recover.store import DEFAULT_URL, RunStore, parse_url
from lousho.recover.store import open as open_store
from lousho.recover.store_postgres import _pg_ddl
from lousho.recover.store_sqlite import BUSY_TIMEOUT_S, SqliteStore


@pytest.mark.parametrize(
    ("url", "path", "synchronous"),
    [
        (DEFAULT_URL, ".lousho/runs.db", "normal"),
        ("sqlite:///runs.db", "runs.db", "normal"),
        ("sqlite:////var/lib/lousho/runs.db", "/var/lib/lousho/runs.db", "normal"),
        ("sqlite:///runs.db?synchronous=full", "runs.db", "full"),
    ],
)
def test_sqlite_urls_name_a_relative_or_absolute_file(url: str, path: str, synchronous: str):
    parsed = parse_url(url)
    assert (parsed.path, parsed.synchronous) == (Path(path), synchronous)


def test_a_percent_encoded_sqlite_path_names_the_file_it_decodes_to(tmp_path: Path):
    """A URL's path is percent-encoded: ``%20`` is a space, ``%3F`` a question mark (which a URL could not hold as
    is: it would start the query), ``%25`` a percent sign. The store opens the decoded file, not one named ``%20``."""
    folder = tmp_path / "my runs"
    url = f"sqlite:///{folder}/100%25 done%3F.db?synchronous=full".replace("my runs", "my%20runs")
    parsed = parse_url(url)
    assert (parsed.path, parsed.synchronous) == (folder / "100% done?.db", "full")
    store = open_store(url)
    try:
        store.create_run("r1", agent="a", kind="send", input={})
    finally:
        store.close()
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".db") == ["100% done?.db"]


def test_a_postgres_url_where_a_sqlite_file_is_wanted_says_so_without_the_password():
    """``parse_url`` is the parser readers of the SQLite file share (the page): a Postgres URL gets its own error."""
    with pytest.raises(StoreNotSqlite) as info:
        parse_url("postgresql://lousho:s3cret@db.internal/runs")
    err = info.value
    assert err.code == "LOUSHO_STORE_NOT_SQLITE" and isinstance(err, UsageError) and "sqlite:///" in err.hint
    assert "s3cret" not in err.message and "db.internal" in err.message


@pytest.mark.parametrize(
    "url", ["mysql://db/runs", "runs.db", "sqlite://host/runs.db", "sqlite:///", "sqlite:///x.db?synchronous=off",
            "sqlite:///x.db?cache=shared"],
)
def test_unknown_schemes_and_malformed_urls_are_unsupported(url: str):
    with pytest.raises(UnsupportedStoreUrl) as info:
        open_store(url)
    assert info.value.code == "LOUSHO_STORE_UNSUPPORTED_URL" and "sqlite:///" in info.value.hint
    assert isinstance(info.value, UsageError)


@pytest.mark.parametrize("template", [
    "postgresql://lousho:s3cret@127.0.0.1:{port}/runs",
    "postgres://lousho@127.0.0.1:{port}/runs?password=s3cret&sslmode=disable",
    "postgresql+psycopg://lousho:s3cret@127.0.0.1:{port}/runs",
])
def test_postgres_urls_open_the_postgres_store_and_an_unreachable_server_is_retryable_without_the_password(
    template: str,
):
    url = template.format(port=free_port())  # nothing listens there: connection refused
    with pytest.raises(StoreUnavailable) as info:
        open_store(url)
    err = info.value
    assert err.code == "LOUSHO_STORE_UNAVAILABLE" and err.retryable and "127.0.0.1" in err.hint
    assert "s3cret" not in err.message + err.hint and "***" in err.location


def test_opening_without_create_refuses_a_missing_file(tmp_path: Path):
    missing = tmp_path / "nope" / "runs.db"
    with pytest.raises(StoreMissing) as info:
        open_store(f"sqlite:///{missing}", create=False)
    assert str(missing) in info.value.hint
    assert not missing.parent.exists()


def test_another_programs_sqlite_file_or_a_non_sqlite_file_is_refused_untouched(tmp_path: Path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    before = other.read_bytes()
    with pytest.raises(StoreNotRunStore, match="another program's \\(notes\\)"):
        open_store(f"sqlite:///{other}")
    assert other.read_bytes() == before  # no lousho table, no WAL mode: a listing command had added both
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(StoreNotRunStore, match="file is not a database") as caught:
        open_store(f"sqlite:///{text}")
    assert caught.value.code == "LOUSHO_STORE_NOT_A_RUN_STORE" and text.read_text() == "hello\n"
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    open_store(f"sqlite:///{empty}").close()  # an empty file is a new store


def test_sqlite_store_uses_wal_a_busy_timeout_and_the_chosen_synchronous(tmp_path: Path):
    for query, expected in (("", 1), ("?synchronous=full", 2)):  # PRAGMA synchronous: 1 NORMAL, 2 FULL
        store = open_store(f"sqlite:///{tmp_path / 'runs.db'}{query}")
        try:
            conn = store._conn  # the settings are per connection: read them on the store's own
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == BUSY_TIMEOUT_S * 1000
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == expected
            assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        finally:
            store.close()


def test_a_writer_kept_waiting_past_the_busy_timeout_gets_a_retryable_store_busy(tmp_path: Path):
    path = tmp_path / "runs.db"
    store = SqliteStore(path, busy_timeout_s=0.2)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holding the write lock
        started = time.monotonic()
        with pytest.raises(StoreBusy) as info:
            store.create_run("r1", agent="a", kind="send", input={})
        assert time.monotonic() - started >= 0.2
        assert info.value.retryable and str(path) in info.value.hint
        blocker.execute("ROLLBACK")
        assert store.create_run("r1", agent="a", kind="send", input={}).id == "r1"  # nothing was left half-done
    finally:
        blocker.close()
        store.close()


def test_migrations_apply_once_and_are_recorded(store: RunStore, store_url: str, open_more):
    open_more()  # a second opener finds the schema current
    versions = [row[0] for row in raw_sql(store_url, "SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == list(range(1, schema.LATEST + 1))
    assert {"runs", "checkpoints", "checkpoint_history", "approvals", "sessions"} <= table_names(store_url)


def test_a_store_written_by_a_newer_lousho_is_refused(store: RunStore, store_url: str, open_more):
    raw_sql(store_url, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
            (schema.LATEST + 1, "2099-01-01T00:00:00.000000Z"))
    with pytest.raises(SchemaTooNew) as info:
        open_more()
    assert info.value.found == schema.LATEST + 1 and store.location in info.value.hint


def test_the_schema_uses_only_portable_column_types():
    """TEXT, INTEGER and REAL only, so the Postgres store can run the same DDL."""
    for migration in schema.MIGRATIONS:
        for statement in migration:
            for line in statement.splitlines():
                words = line.split("--")[0].split()
                if len(words) >= 2 and words[0].islower() and not line.lstrip().startswith(("CREATE", "PRIMARY")):
                    assert words[1].rstrip(",") in ("TEXT", "INTEGER", "REAL"), line
            for sqlite_only in ("AUTOINCREMENT", "WITHOUT ROWID", "OR REPLACE", "OR IGNORE", "PRAGMA", "STRICT"):
                assert sqlite_only not in statement.upper(), statement


def _write_version_2_store(store_url: str) -> None:
    """A store as lousho wrote it at schema version 2, when the history was a ring table of its own: r1 saved 12
    steps with a ring of 5 (steps 7-11 left in it), r2 saved 3 with a ring of 50."""
    ddl = (lambda s: s) if store_url.startswith("sqlite:") else _pg_ddl
    raw_sql(store_url, ddl(schema.VERSION_TABLE))
    for version in (0, 1):
        for statement in schema.MIGRATIONS[version]:
            raw_sql(store_url, ddl(statement))
        raw_sql(store_url, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                (version + 1, "2026-11-01T00:00:00.000000Z"))
    for run_id, steps, ring in (("r1", 12, 5), ("r2", 3, 50)):
        raw_sql(store_url, "INSERT INTO runs (id, agent, kind, status, input, created_at, updated_at) "
                "VALUES (?, 'a', 'send', 'interrupted', '{}', ?, ?)", (run_id, "2026-11-01T00:00:00.000000Z",
                                                                        "2026-11-01T00:00:00.000000Z"))
        for step in range(steps):
            row = (run_id, step, f"step-{step}", f'{{"i": {step}}}', "2026-11-01T00:00:00.000000Z", 0)
            raw_sql(store_url, "INSERT INTO checkpoints (run_id, step, name, output, saved_at, epoch) "
                    "VALUES (?, ?, ?, ?, ?, ?)", row)
            seq = step + 1
            if seq > steps - ring:
                raw_sql(store_url, "INSERT INTO checkpoint_history (run_id, slot, seq, step, name, output, saved_at, "
                        "epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (run_id, seq % ring, seq, *row[1:]))


def test_a_store_written_at_schema_2_migrates_its_history_ring_into_the_view(store_url: str, open_more):
    """Version 3 replaces the ring table with a view of the checkpoints (one write per step): every entry the ring
    held is still in the history, the steps it had dropped stay out, and new saves follow the ring's rule."""
    _write_version_2_store(store_url)
    store = open_more(history_limit=5)
    versions = [row[0] for row in raw_sql(store_url, "SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [1, 2, 3]
    assert sorted(store.load_steps("r1")) == list(range(12)) and store.load_steps("r1")[3].output == {"i": 3}
    assert [e.step for e in store.history("r1")] == [11, 10, 9, 8, 7]
    assert [e.step for e in open_more(history_limit=50).history("r2")] == [2, 1, 0]
    store.save_step("r1", 12, "step-12", {"i": 12}, epoch=0)
    assert [e.step for e in store.history("r1")] == [12, 11, 10, 9, 8]
    assert store.delete_run("r1") and store.history("r1") == [] and store.load_steps("r1") == {}
