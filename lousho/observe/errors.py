"""Errors of the observe part: the daemon, the store and its clients."""

from __future__ import annotations

import errno

from lousho.kernel.errors import LoushoError, UsageError


class ObserveError(LoushoError):
    code = "LOUSHO_OBSERVE_ERROR"


class DaemonUnreachable(ObserveError):
    code = "LOUSHO_OBSERVE_UNREACHABLE"
    retryable = True
    hint = "start it with `lousho observe`, or pass --db PATH to read the DuckDB file directly"


class Unauthorized(ObserveError):
    code = "LOUSHO_OBSERVE_UNAUTHORIZED"
    hint = ("pass the daemon's token with --token-file FILE or the LOUSHO_TOKEN environment variable "
            "(--token T works too, but shows in the process list)")


class SqlRefused(ObserveError):
    """The SQL API runs one read-only statement; anything else is refused before it runs."""

    code = "LOUSHO_SQL_REFUSED"
    hint = "the SQL API is read-only: one SELECT (or WITH ... SELECT) statement, no files or network"


class SqlFailed(ObserveError):
    """The statement was allowed but DuckDB could not run it (syntax, unknown column, timeout)."""

    code = "LOUSHO_SQL_FAILED"
    hint = "check the query; `lousho sql \"DESCRIBE spans\"` lists the columns"


class SqlTimedOut(SqlFailed):
    """The statement ran past the time limit and was stopped: narrower, it may run (a syntax error never will)."""

    code = "LOUSHO_SQL_TIMEOUT"
    hint = "narrow the query (a WHERE on start_ns or run_id, a LIMIT), or raise --sql-timeout"


class SqlBusy(ObserveError):
    """Every SQL worker is busy and the wait queue is full; ingest is unaffected."""

    code = "LOUSHO_SQL_BUSY"
    retryable = True
    hint = "retry after the Retry-After delay; the daemon's --sql-workers sets how many queries run at once"


class SqlTooLarge(ObserveError):
    """The query text is over the daemon's bound; refused before anything parses it (HTTP 413)."""

    code = "LOUSHO_SQL_TOO_LARGE"
    hint = ("send a shorter query: put long value lists in a join or a range, not an IN list; "
            "the daemon's --sql-max-query-kib sets the bound")


class SqlOutOfMemory(ObserveError):
    """The query needed more memory than one query may take; the daemon is unaffected."""

    code = "LOUSHO_SQL_OUT_OF_MEMORY"
    hint = ("narrow the query (a WHERE on start_ns or run_id, fewer columns, a LIMIT) or aggregate in SQL; "
            "the daemon's --sql-query-memory and --memory-limit set the bounds")


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


class TlsIncomplete(UsageError):
    code = "LOUSHO_OBSERVE_TLS_INCOMPLETE"
    hint = "pass both --tls-cert CERT.pem and --tls-key KEY.pem, or neither"


class TlsUnusable(UsageError):
    code = "LOUSHO_OBSERVE_TLS_FILES"
    hint = "--tls-cert and --tls-key must be readable PEM files: a certificate and its private key"


class TlsExpired(UsageError):
    """The certificate's notAfter has passed: every client that verifies it would refuse the daemon."""

    code = "LOUSHO_OBSERVE_TLS_EXPIRED"
    hint = "renew the certificate (or pass a valid --tls-cert and its --tls-key) and start again"


class TlsNotYetValid(UsageError):
    """The certificate's notBefore is still to come: verifying clients refuse it until then."""

    code = "LOUSHO_OBSERVE_TLS_NOT_YET_VALID"
    hint = "check this machine's clock, or issue the certificate with a notBefore in the past"


class LakeIncomplete(UsageError):
    code = "LOUSHO_LAKE_INCOMPLETE"
    hint = "give the catalog (--lake postgresql://...) and where its Parquet files go (--lake-data DIR)"


class TokenFileUnreadable(UsageError):
    code = "LOUSHO_OBSERVE_TOKEN_FILE"
    hint = "point --token-file at a readable file holding the token on one line"


class BadToken(UsageError):
    code = "LOUSHO_OBSERVE_BAD_TOKEN"
    hint = ("use a token of printable ASCII with no space at either end, e.g. from: python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'")


class BadCaCert(UsageError):
    code = "LOUSHO_OBSERVE_CA_CERT"
    hint = "point --ca-cert (or LOUSHO_CA_CERT) at the daemon's PEM certificate"


class RunNotFound(ObserveError):
    code = "LOUSHO_RUN_NOT_FOUND"
    hint = "`lousho runs` lists the run ids the store has"


class StoreNotLousho(ObserveError):
    """A DuckDB file that holds another program's tables and no lousho store: left as it is."""

    code = "LOUSHO_STORE_NOT_LOUSHO"
    hint = "pass --db a new file or a lousho store: the daemon owns its file and would add its tables to this one"


class StoreCorrupt(ObserveError):
    """The store file is damaged (truncated, overwritten): DuckDB's block checksums or reads fail."""

    code = "LOUSHO_STORE_CORRUPT"
    hint = "move the store file aside (or restore a backup) and start again; a new store is created"


class StoreDiskFull(ObserveError):
    """The store's file system has no room: commits fail until space returns. Nothing committed is lost
    (the WAL keeps it), so this is retryable, never corruption; the daemon resumes by itself."""

    code = "LOUSHO_STORE_DISK_FULL"
    retryable = True
    hint = "free space on the disk that holds the store; the daemon resumes by itself, no restart needed"


class StoreLocked(ObserveError):
    """Another process (a running daemon) holds the store file's write lock."""

    code = "LOUSHO_STORE_LOCKED"
    hint = "a daemon already owns this file; use --url http://HOST:PORT of that daemon (default http://127.0.0.1:4318)"


class StoreNotDuckDB(ObserveError):
    """The path holds a file that is not a DuckDB store (text, SQLite, an empty file)."""

    code = "LOUSHO_STORE_NOT_DUCKDB"
    hint = "pass the path of a lousho store, or a path that does not exist yet to create one"


class StoreUnwritable(ObserveError):
    """The store's directory cannot be created, or the file cannot be opened, for lack of rights."""

    code = "LOUSHO_STORE_UNWRITABLE"
    hint = "pass a --db in a directory this user can write, or fix the directory's permissions"


class StoreOpenFailed(ObserveError):
    code = "LOUSHO_STORE_OPEN_FAILED"
    hint = "the message has DuckDB's reason; check the --db path"


class PortInUse(ObserveError):
    code = "LOUSHO_OBSERVE_PORT_IN_USE"
    hint = "another process listens there: stop it, or pass another --port / --grpc-port (0 picks a free one)"


def bind_error(what: str, host: str, port: int, error: OSError) -> ObserveError:
    """The coded error for a listening socket that cannot be bound."""
    if error.errno == errno.EADDRINUSE or "in use" in str(error).lower():
        return PortInUse(f"the {what} port {host}:{port} is already in use")
    return ObserveError(f"cannot listen for {what} on {host}:{port}: {error.strerror or error}",
                        code="LOUSHO_OBSERVE_BIND_FAILED",
                        hint="check --host (an address of this machine) and --port / --grpc-port")


class BadAgentOption(UsageError):
    code = "LOUSHO_OBSERVE_BAD_AGENT"
    hint = "write --agent NAME=DIR:CHECK_MODULE, e.g. --agent coder=agents/coder:agents/coder/check.py"


# The two refusals below are raised by the check of --agent the entry point wires into the daemon command
# (``lousho.observe.entry``): it asks the improve part, which observe may not import (DESIGN §1).
class AgentDirInvalid(BadAgentOption):
    """DIR of --agent exists but holds no harness the loop could edit."""

    code = "LOUSHO_OBSERVE_AGENT_DIR_INVALID"
    hint = ("DIR is the agent's harness directory: a non-empty instructions.md, optionally skills/<name>/SKILL.md "
            "(check it with `lousho improve revision DIR`)")


class AgentCheckInvalid(BadAgentOption):
    """CHECK_MODULE of --agent cannot be imported, or defines no check()."""

    code = "LOUSHO_OBSERVE_AGENT_CHECK_INVALID"
    hint = ("CHECK_MODULE is a Python file that imports cleanly and defines check(input, output) -> Verdict, "
            "and probe(harness_dir, case, repeat) for an agent lousho did not build (docs/improve.md)")


class LakeUnavailable(ObserveError):
    """The lake's environment is missing, or its catalog or data path cannot be reached."""

    code = "LOUSHO_LAKE_UNAVAILABLE"
    retryable = True
    hint = ("check the catalog URL and that Postgres answers; the lake's environment is built by `lousho lake setup` "
            "(or `make lake-venv` in a checkout), or point LOUSHO_LAKE_PYTHON at one")


class LakeFailed(ObserveError):
    """The lake refused a request (a query's error, a conflict retried past its bound, a schema too new)."""

    code = "LOUSHO_LAKE_FAILED"
    hint = "check the query against `DESCRIBE spans` on the lake; a commit is retried from its position"


class LakeNameInUse(ObserveError):
    """Another live daemon ships to the lake under this daemon's lake name (its positions are kept per name)."""

    code = "LOUSHO_LAKE_NAME_IN_USE"
    hint = ("give each daemon of the fleet a name of its own with --lake-name (the default, host:store path, is "
            "the same for containers that share a hostname and a volume path)")


class LakeNameChanged(ObserveError):
    """The store shipped to the lake under another name: under a new one it would ship everything again."""

    code = "LOUSHO_LAKE_NAME_CHANGED"
    hint = "start it without --lake-name (it keeps the name it shipped under), or pass that name"
