"""``connect(target)``: one client over the daemon's SQL API or a DuckDB file, read-only.

Only the daemon opens the store read-write, so while it runs everything else reads through it;
when it does not run, the file can be opened read-only directly. Both give Polars frames.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Protocol

import duckdb
import polars as pl
import pyarrow as pa

from lousho.observe import sql as sql_api
from lousho.observe.errors import (
    BadCaCert,
    DaemonUnreachable,
    ObserveError,
    SqlBusy,
    SqlFailed,
    SqlRefused,
    SqlUnsupportedType,
    Unauthorized,
)
from lousho.observe.sql_json import column_values, row_keys
from lousho.observe.store import lock_configuration, open_read_only

_ERRORS: dict[str, type[ObserveError]] = {
    SqlRefused.code: SqlRefused,
    SqlFailed.code: SqlFailed,
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

    def fetch(self, query: str, params: list[Any] | None = None) -> sql_api.QueryResult: ...

    def close(self) -> None: ...


class DaemonClient:
    def __init__(
        self, url: str, *, token: str | None = None, timeout: float = 120.0,
        ca_cert: Path | None = None,
    ) -> None:
        """``ca_cert``: a PEM certificate to trust for an https ``url`` (a daemon with a
        self-signed one); without it, the system's trust store."""
        self.target = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._ssl = _ssl_context(ca_cert) if url.startswith("https://") else None

    def sql(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        return _frame(self.fetch(query, params).table)

    def fetch(self, query: str, params: list[Any] | None = None) -> sql_api.QueryResult:
        body = json.dumps({"query": query, "params": params or []}, default=str).encode()
        headers = {
            "content-type": "application/json",
            "accept": sql_api_arrow_type(),
        }
        if self._token:
            headers["authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(
            f"{self.target}/v1/sql", data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._ssl) as response:
                payload = response.read()
                truncated = response.headers.get("x-lousho-truncated", "").lower() == "true"
        except urllib.error.HTTPError as e:
            raise _http_error(e) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            raise DaemonUnreachable(f"no daemon answers at {self.target} ({reason})") from None
        return sql_api.QueryResult(table=pa.ipc.open_stream(payload).read_all(), truncated=truncated)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.target}/healthz", timeout=2, context=self._ssl) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def close(self) -> None:
        return None


class FileClient:
    def __init__(self, path: Path) -> None:
        self.target = str(path)
        self._con: duckdb.DuckDBPyConnection = open_read_only(path)
        try:
            lock_configuration(self._con)
        except BaseException:
            self._con.close()
            raise

    def sql(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        return _frame(self.fetch(query, params).table)

    def fetch(self, query: str, params: list[Any] | None = None) -> sql_api.QueryResult:
        return sql_api.run_query(self._con, query, params, max_rows=2**62)

    def close(self) -> None:
        self._con.close()


def connect(
    target: str | Path, *, token: str | None = None, ca_cert: Path | None = None
) -> StoreClient:
    """A client for ``http(s)://host:port`` (the daemon) or a path to a store file."""
    text = str(target)
    if text.startswith(("http://", "https://")):
        return DaemonClient(text, token=token, ca_cert=ca_cert)
    return FileClient(Path(text))


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
    table = table.rename_columns(row_keys(table.column_names))
    if all(_polars_takes(t) for t in table.schema.types):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame
    return pl.DataFrame([_series(name, table.column(name)) for name in table.column_names])


def _polars_takes(t: pa.DataType) -> bool:
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
        return cls(detail["message"], code=detail["code"], hint=detail.get("hint") or None)
    except (ValueError, KeyError, TypeError):
        return ObserveError(f"the daemon answered HTTP {e.code}")
