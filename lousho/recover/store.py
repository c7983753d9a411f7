"""Opening a run store: ``open(url)``, the URL forms it takes (``parse_url``), and the contract re-exported.

The contract (``RunStore``) lives in ``store_protocol`` and the records it returns in ``records``, leaves that the
backends import; this module imports a backend only inside ``open``, so no backend imports it and psycopg loads
only for a Postgres URL.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lousho.recover.errors import StoreNotSqlite, UnsupportedStoreUrl
from lousho.recover.records import Approval, OutageState, Session, StepRecord, StoredRun
from lousho.recover.store_protocol import (
    DEFAULT_HISTORY_LIMIT,
    UNFINISHED,
    UPDATABLE,
    RunStore,
    check_history_limit,
)

DEFAULT_URL = "sqlite:///.lousho/runs.db"


def is_postgres_url(url: str) -> bool:
    """``postgresql://``, ``postgres://`` or ``postgresql+driver://``: a URL for the Postgres store."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    return scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+")


@dataclass(frozen=True)
class SqliteUrl:
    path: Path
    synchronous: str


def parse_url(url: str) -> SqliteUrl:
    """The SQLite file a ``sqlite:///relative/path`` or ``sqlite:////absolute/path`` URL names, and its
    ``?synchronous=normal|full``. The path is percent-decoded, as every URL's is (``%20`` is a space, ``%25`` a
    percent sign), so a file whose name holds ``?`` or ``#`` can be named at all.

    Also the one parser for readers of the SQLite store (the page): a Postgres URL is ``StoreNotSqlite``,
    anything else that is not such a URL ``UnsupportedStoreUrl``.
    """
    if is_postgres_url(url):
        raise StoreNotSqlite(url)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() != "sqlite" or parts.netloc or not url.startswith("sqlite:///") or len(parts.path) < 2:
        raise UnsupportedStoreUrl(url)
    query = urllib.parse.parse_qs(parts.query)
    synchronous = query.pop("synchronous", ["normal"])[-1].lower()
    if query or synchronous not in ("normal", "full"):
        raise UnsupportedStoreUrl(url)
    return SqliteUrl(Path(urllib.parse.unquote(parts.path[1:])), synchronous)


def open(  # shadows the builtin in this module on purpose: callers write ``store.open(url)``
    url: str = DEFAULT_URL,
    *,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    create: bool = True,
    fault: Callable[[str], None] | None = None,
) -> RunStore:
    """Open (and migrate) the run store at ``url``.

    Args:
        url: ``sqlite:///path/to/runs.db`` (default ``sqlite:///.lousho/runs.db``), or a libpq URL
            ``postgresql://user:password@host:port/dbname[?param=value&...]`` (also ``postgres://`` and
            ``postgresql+psycopg://``) for the Postgres store; any libpq parameter may follow, e.g.
            ``sslmode=require`` or ``options=-c%20search_path%3Dlousho`` for a schema of its own. Any other scheme is
            ``UnsupportedStoreUrl``.
        history_limit: entries kept per run in the checkpoint history ring; 0 disables it.
        create: create the file (and its folder), or the tables in the Postgres database, when missing; when
            false, ``StoreMissing``. A Postgres database itself is never created: that is for its owner.
        fault: tests only: called with a fault point's name (``"save_step:before_commit"``...).
    """
    check_history_limit(history_limit)
    if is_postgres_url(url):  # psycopg loads only here
        from lousho.recover.store_postgres import PostgresStore

        return PostgresStore(url, history_limit=history_limit, create=create, fault=fault)
    parsed = parse_url(url)
    from lousho.recover.store_sqlite import SqliteStore

    return SqliteStore(
        parsed.path, synchronous=parsed.synchronous, history_limit=history_limit, create=create, fault=fault,
    )


__all__ = [
    "DEFAULT_HISTORY_LIMIT", "DEFAULT_URL", "UNFINISHED", "UPDATABLE", "Approval", "OutageState", "RunStore",
    "Session", "SqliteUrl", "StepRecord", "StoredRun", "check_history_limit", "is_postgres_url", "open", "parse_url",
]
