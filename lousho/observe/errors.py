"""Errors of the observe part: the daemon, the store and its clients."""

from __future__ import annotations

from lousho.errors import LoushoError, UsageError


class ObserveError(LoushoError):
    code = "LOUSHO_OBSERVE_ERROR"


class DaemonUnreachable(ObserveError):
    code = "LOUSHO_OBSERVE_UNREACHABLE"
    retryable = True
    hint = "start it with `lousho observe`, or pass --db PATH to read the DuckDB file directly"


class Unauthorized(ObserveError):
    code = "LOUSHO_OBSERVE_UNAUTHORIZED"
    hint = "pass the daemon's token with --token or the LOUSHO_TOKEN environment variable"


class SqlRefused(ObserveError):
    """The SQL API runs one read-only statement; anything else is refused before it runs."""

    code = "LOUSHO_SQL_REFUSED"
    hint = "the SQL API is read-only: one SELECT (or WITH ... SELECT) statement, no files or network"


class SqlFailed(ObserveError):
    """The statement was allowed but DuckDB could not run it (syntax, unknown column, timeout)."""

    code = "LOUSHO_SQL_FAILED"
    hint = "check the query; `lousho sql \"DESCRIBE spans\"` lists the columns"


class SqlBusy(ObserveError):
    """Every SQL worker is busy and the wait queue is full; ingest is unaffected."""

    code = "LOUSHO_SQL_BUSY"
    retryable = True
    hint = "retry after the Retry-After delay; the daemon's --sql-workers sets how many queries run at once"


class SqlUnsupportedType(ObserveError):
    """A result column has a type the answer's format cannot carry."""

    code = "LOUSHO_SQL_UNSUPPORTED_TYPE"
    hint = "cast the column in the query, e.g. col::VARCHAR"


class SqlTruncated(ObserveError):
    """The daemon stopped at its row cap: the output is not the whole result."""

    code = "LOUSHO_SQL_TRUNCATED"
    hint = "narrow the query (WHERE, LIMIT), or pass --allow-truncated to accept the first rows"


class StoreMissing(ObserveError):
    code = "LOUSHO_STORE_MISSING"
    hint = "start the daemon once (`lousho observe --db PATH`) to create the store"


class SchemaTooNew(ObserveError):
    code = "LOUSHO_STORE_SCHEMA_TOO_NEW"
    hint = "this store was written by a newer lousho; upgrade lousho to read it"


class UnsafeBind(UsageError):
    code = "LOUSHO_OBSERVE_UNSAFE_BIND"
    hint = "pass --token T (clients then send `Authorization: Bearer T`), or bind 127.0.0.1"


class RunNotFound(ObserveError):
    code = "LOUSHO_RUN_NOT_FOUND"
    hint = "`lousho runs` lists the run ids the store has"
