"""``connect(target)``: one client over the daemon's SQL API or a DuckDB file, read-only.

Only the daemon opens the store read-write, so while it runs everything else reads through it;
when it does not run, the file can be opened read-only directly. Both give Polars frames.

DuckDB and pyarrow (with NumPy, 0.3 s of imports) load only when used: for a store file, and by
``sql`` and ``fetch``, which take any column type; Polars when a frame is asked for. ``frame`` (the
store's own columns) needs urllib and Polars, which reads the daemon's Arrow stream itself, and
``answer`` and ``csv`` only urllib: `lousho runs` and `lousho sql` over the daemon start without the rest.
"""

from __future__ import annotations

import http.client
import io
import json
import re
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lousho.observe.errors import (
    BadCaCert,
    DaemonUnreachable,
    ObserveError,
    SqlBusy,
    SqlFailed,
    SqlRefused,
    SqlTimedOut,
    SqlUnsupportedType,
    StoreMissing,
    Unauthorized,
)

if TYPE_CHECKING:
    import duckdb
    import polars as pl
    import pyarrow as pa

    from lousho.observe.sql.query import QueryResult

_ERRORS: dict[str, type[ObserveError]] = {
    SqlRefused.code: SqlRefused,
    SqlFailed.code: SqlFailed,
    SqlTimedOut.code: SqlTimedOut,
    SqlBusy.code: SqlBusy,
    SqlUnsupportedType.code: SqlUnsupportedType,
    Unauthorized.code: Unauthorized,
}


class StoreClient(Protocol):
    """Read access to a span store.

    ``sql`` runs one read-only SELECT with ``?`` parameters and returns every row as a Polars
    frame (repeated column names get ``_2``, ``_3``... suffixes); ``fetch`` returns the Arrow
    result as sent and whether the daemon's row cap cut it short. Both raise SqlRefused for anything
    that is not a read, SqlFailed when the engine cannot run it, SqlBusy when the daemon's SQL
    workers are all taken, DaemonUnreachable when the daemon does not answer. Safe to call from one thread at a
    time; open one client per thread.
    """

    target: str

    def sql(self, query: str, params: list[Any] | None = None) -> pl.DataFrame: ...

    def frame(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        """As ``sql``, for a query whose columns have unique names and types Polars reads (the
        store's own columns: no INTERVAL, UNION or extension type); from the daemon it needs
        Polars alone, so a command that lists runs does not load pyarrow."""
        ...

    def fetch(self, query: str, params: list[Any] | None = None) -> QueryResult: ...

    def close(self) -> None: ...


class DaemonClient:
    def __init__(
        self, url: str, *, token: str | None = None, timeout: float = 120.0,
        ca_cert: Path | None = None,
    ) -> None:
        """``ca_cert``: a PEM certificate to trust for an https ``url`` (a daemon with a
        self-signed one); without it, the system's trust store. ``?scope=lake`` on the URL sends every query to
        the fleet's lake through that daemon (the loop of a daemon in a fleet reads every daemon's runs)."""
        base, _, query = url.partition("?")
        self.target = base.rstrip("/")
        self._sql_path = "/v1/sql" + (f"?{query}" if query else "")
        self._token = token
        self._timeout = timeout
        self._ssl = _ssl_context(ca_cert) if url.startswith("https://") else None

    def sql(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        return _frame(self.fetch(query, params).table)

    def frame(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        import polars as pl

        payload, _ = self._post(query, params, sql_api_arrow_type())
        return pl.read_ipc_stream(io.BytesIO(payload))

    def fetch(self, query: str, params: list[Any] | None = None) -> QueryResult:
        import pyarrow as pa

        from lousho.observe.sql.query import QueryResult

        payload, headers = self._post(query, params, sql_api_arrow_type())
        return QueryResult(table=pa.ipc.open_stream(payload).read_all(), truncated=_truncated(headers))

    def answer(self, query: str, params: list[Any] | None = None) -> SqlAnswer:
        """The daemon's JSON answer: its values mapped as ``sql_json`` documents, by the daemon."""
        payload, _ = self._post(query, params, "application/json")
        doc = json.loads(payload)
        return SqlAnswer(columns=doc["columns"], keys=doc["keys"], rows=doc["rows"], truncated=doc["truncated"])

    def csv(self, query: str, params: list[Any] | None = None) -> CsvAnswer:
        """The result as the daemon writes it for ``Accept: text/csv`` (``sql_csv``): UTF-8 bytes, header first."""
        payload, headers = self._post(query, params, "text/csv")
        return CsvAnswer(text=payload, rows=int(headers.get("x-lousho-rows", "0")), truncated=_truncated(headers))

    def _post(self, query: str, params: list[Any] | None, accept: str) -> tuple[bytes, Message]:
        """The reply's body in ``accept``'s type, and its headers."""
        body = json.dumps({"query": query, "params": params or []}, default=str).encode()
        headers = {"content-type": "application/json", "accept": accept}
        if self._token:
            headers["authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(
            f"{self.target}{self._sql_path}", data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._ssl) as response:
                payload = response.read()
                headers = response.headers
        except urllib.error.HTTPError as e:
            raise _http_error(e) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            raise DaemonUnreachable(f"no daemon answers at {self.target} ({reason})") from None
        except http.client.HTTPException as e:
            raise ObserveError(f"{self.target} did not answer as HTTP ({type(e).__name__}: {e})",
                               hint=_NOT_A_DAEMON) from None
        return payload, headers

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.target}/healthz", timeout=2, context=self._ssl) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class CsvAnswer:
    """A result as the daemon's CSV (``sql_csv``): ``text`` is UTF-8, header row first, ``rows`` records after it."""

    text: bytes
    rows: int
    truncated: bool


def _truncated(headers: Message) -> bool:
    """Whether the daemon's row cap cut the result short."""
    return headers.get("x-lousho-truncated", "").lower() == "true"


@dataclass(frozen=True)
class SqlAnswer:
    """A result as the SQL API's JSON answer: ``rows`` are objects keyed by ``keys`` (``columns`` with
    repeats suffixed ``_2``, ``_3``...)."""

    columns: list[str]
    keys: list[str]
    rows: list[dict[str, Any]]
    truncated: bool


class FileClient:
    def __init__(self, path: Path) -> None:
        from lousho.observe.store.span_store import lock_configuration, open_read_only

        self.target = str(path)
        self._con: duckdb.DuckDBPyConnection = open_read_only(path)
        try:
            lock_configuration(self._con)
        except BaseException:
            self._con.close()
            raise

    def sql(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        return _frame(self.fetch(query, params).table)

    def frame(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        return self.sql(query, params)

    def fetch(self, query: str, params: list[Any] | None = None) -> QueryResult:
        from lousho.observe.sql.query import run_query

        return run_query(self._con, query, params, max_rows=2**62)

    def close(self) -> None:
        self._con.close()


class LakeStoreClient:
    """The fleet's lake (every daemon's spans) as a store: the same tables and views, read-only."""

    def __init__(self, catalog: str, data_path: Path) -> None:
        from lousho.observe.lake.lake_client import LakeClient, LakeTarget

        self.target = catalog
        self._client = LakeClient(LakeTarget(catalog, str(data_path)), read_only=True)

    def sql(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        return _frame(self.fetch(query, params).table)

    def frame(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        return self.sql(query, params)

    def fetch(self, query: str, params: list[Any] | None = None) -> QueryResult:
        from lousho.observe.lake.lake_query import run_lake_query

        return run_lake_query(self._client, query, params, max_rows=2**62)

    def close(self) -> None:
        self._client.close()


def connect(
    target: str | Path | None = None, *, token: str | None = None, ca_cert: Path | None = None,
    lake: str | None = None, lake_data: Path | None = None,
) -> StoreClient:
    """A client for ``http(s)://host:port`` (the daemon), a path to a store file, or the fleet's lake
    (``lake=`` its catalog, ``lake_data=`` its data directory)."""
    if lake is not None:
        if target is not None or lake_data is None:
            raise ValueError("connect(lake=CATALOG, lake_data=DIR) takes no other target")
        return LakeStoreClient(lake, Path(lake_data))
    if target is None:
        raise ValueError("connect() needs a daemon URL, a store file or lake=")
    text = str(target)
    if text.startswith(("http://", "https://")):
        return DaemonClient(text, token=token, ca_cert=ca_cert)
    if _HOST_PORT.fullmatch(text) and not Path(text).exists():
        raise StoreMissing(f"no store at {text}", hint=f"a daemon's address starts with its scheme: http://{text}")
    return FileClient(Path(text))


# host:port with no scheme (127.0.0.1:4318, localhost:4318, [::1]:4318): a daemon meant, not a file.
_HOST_PORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[\w.-]+):\d{1,5}")


def _ssl_context(ca_cert: Path | None) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=str(ca_cert) if ca_cert is not None else None)
    except (OSError, ssl.SSLError) as e:
        raise BadCaCert(f"cannot load the CA certificate {ca_cert}: {e}") from None


def sql_api_arrow_type() -> str:
    return "application/vnd.apache.arrow.stream"


def _frame(table: pa.Table) -> pl.DataFrame:
    """The table as a Polars frame. A column Polars cannot take (an INTERVAL or UNION, even nested:
    Polars panics on those rather than raising) becomes the text of its JSON form (``sql_json``)."""
    import polars as pl

    from lousho.observe.sql.sql_json import row_keys

    table = table.rename_columns(row_keys(table.column_names))
    if all(_polars_takes(t) for t in table.schema.types):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame
    return pl.DataFrame([_series(name, table.column(name)) for name in table.column_names])


def _polars_takes(t: pa.DataType) -> bool:
    import pyarrow as pa

    if t == pa.month_day_nano_interval() or pa.types.is_union(t) or isinstance(t, pa.BaseExtensionType):
        return False
    if pa.types.is_struct(t):
        return all(_polars_takes(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _polars_takes(t.key_type) and _polars_takes(t.item_type)
    if pa.types.is_dictionary(t):
        return _polars_takes(t.value_type)
    if hasattr(t, "value_type"):
        return _polars_takes(t.value_type)
    return True


def _series(name: str, column: pa.ChunkedArray) -> pl.Series:
    import polars as pl

    from lousho.observe.sql.sql_json import column_values

    if _polars_takes(column.type):
        series = pl.from_arrow(column)
        assert isinstance(series, pl.Series)
        return series.alias(name)
    values = column_values(name, column)
    return pl.Series(name, [None if v is None else v if isinstance(v, str) else json.dumps(v) for v in values],
                     dtype=pl.String)


def _http_error(e: urllib.error.HTTPError) -> ObserveError:
    try:
        detail = json.loads(e.read())["error"]
        cls = _ERRORS.get(detail["code"], ObserveError)
        # The daemon's hint names the header; at this end the user gives a flag or a variable.
        hint = cls.hint if cls is Unauthorized else detail.get("hint") or None
        return cls(detail["message"], code=detail["code"], hint=hint)
    except (ValueError, KeyError, TypeError):
        return ObserveError(f"{e.url} answered HTTP {e.code}, not a lousho error", hint=_NOT_A_DAEMON)


_NOT_A_DAEMON = ("is this a lousho daemon's HTTP address? `lousho observe` serves OTLP/HTTP and SQL on "
                 "http://127.0.0.1:4318 by default (4317 is gRPC); give the address without a path")
