"""CLI of the observe part's client side: ``lousho sql``, ``lousho runs`` (the daemon's ``lousho observe`` is
``daemon_cli.py``)."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from lousho.kernel.cli_support import table_console
from lousho.kernel.errors import UsageError
from lousho.observe.client.empty_runs import why_no_runs
from lousho.observe.client.render import print_answer, print_frame, print_table
from lousho.observe.client.store_client import CsvAnswer, DaemonClient, SqlAnswer, StoreClient, connect
from lousho.observe.errors import BadToken, DaemonUnreachable, RunNotFound, SqlTruncated, TokenFileUnreadable
from lousho.observe.runs.runs_view import newest_runs_query, runs_select

if TYPE_CHECKING:
    import polars as pl
    from rich.tree import Tree

    from lousho.observe.sql.query import QueryResult

# Commands that only talk to the daemon load click and urllib, and Polars to list runs: DuckDB and
# pyarrow load for a store file, rich for a table, the daemon for `lousho observe`
# (tests/observe/test_cli_start.py).


DEFAULT_URL = "http://127.0.0.1:4318"
DEFAULT_DB = Path(".lousho/observe.duckdb")


def target_options(fn: Any) -> Any:
    # --token-file and --ca-cert reach open_store through the click context, so the commands that
    # use these options keep their signatures.
    fn = click.option("--ca-cert", type=click.Path(path_type=Path), envvar="LOUSHO_CA_CERT",
                      default=None, expose_value=False, callback=_remember,
                      help="Trust this PEM certificate for an https --url (a self-signed daemon) "
                           "[env LOUSHO_CA_CERT].")(fn)
    fn = click.option("--token-file", type=click.Path(path_type=Path), default=None,
                      expose_value=False, callback=_remember,
                      help="Read the daemon's bearer token from this file (one line).")(fn)
    fn = click.option("--token", envvar="LOUSHO_TOKEN", default=None,
                      help="The daemon's bearer token [env LOUSHO_TOKEN]; prefer the variable or "
                           "--token-file: a flag shows in the process list.")(fn)
    fn = click.option("--lake-data", type=click.Path(path_type=Path), default=None, expose_value=False,
                      callback=_remember, metavar="DIR", help="The lake's data directory (with --lake).")(fn)
    fn = click.option("--lake", default=None, expose_value=False, callback=_remember, metavar="CATALOG",
                      help="Read the fleet's DuckLake (every daemon's runs) through its catalog, a Postgres URL; "
                           "with --lake-data.")(fn)
    fn = click.option("--db", type=click.Path(path_type=Path), envvar="LOUSHO_DB", default=None,
                      help="Read this store file directly (read-only) [env LOUSHO_DB].")(fn)
    fn = click.option("--url", envvar="LOUSHO_URL", default=None,
                      help=f"The daemon's address (default {DEFAULT_URL}) [env LOUSHO_URL].")(fn)
    return fn


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    # ctx.meta is shared by a group and its sub-command, both of which take these options: an option left
    # out after the sub-command must not erase the one given before it.
    key = f"lousho.observe.{param.name}"
    if value is not None or key not in ctx.meta:
        ctx.meta[key] = value
    return value


TARGET = ("url", "db", "token")


def group_target(ctx: click.Context, **given: Any) -> dict[str, Any]:
    """The store options of a sub-command of a group that takes them too (``lousho runs --db F show RUN`` and
    ``lousho runs show RUN --db F``): the sub-command's where typed on its command line, else the group's."""
    parent = dict(ctx.obj or {})
    return {name: given[name] if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
            or parent.get(name) is None else parent[name] for name in TARGET}


def _token(token: str | None, token_file: Path | None) -> str | None:
    """The token from --token-file, else from --token or LOUSHO_TOKEN; a file and a flag together
    are a usage error (which one was meant?)."""
    if token_file is None:
        return None if token is None else sendable_token(token, "--token or LOUSHO_TOKEN")
    ctx = click.get_current_context(silent=True)
    if token and ctx is not None and ctx.get_parameter_source("token") is ParameterSource.COMMANDLINE:
        raise UsageError("give --token or --token-file, not both", code="LOUSHO_OBSERVE_TOKEN_TWICE",
                         hint="keep --token-file (a flag shows in the process list)")
    return read_token_file(token_file)


def read_token_file(path: Path) -> str:
    """The token in ``path``: read once, surrounding whitespace stripped; missing, empty or holding
    whitespace inside refused.

    HTTP strips a header value's surrounding whitespace and cannot carry a line break, so a token with
    either could never be sent by any client: the daemon would start and refuse everyone."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TokenFileUnreadable(f"cannot read the token file {path}: {e}") from None
    token = text.strip()
    if not token:
        raise TokenFileUnreadable(f"the token file {path} is empty")
    if "\n" in token or "\r" in token:
        raise TokenFileUnreadable(f"the token in {path} holds a second line, which an HTTP header cannot carry")
    return sendable_token(token, f"the token in {path}")


def sendable_token(token: str, where: str) -> str:
    """``token`` if every client can send it, else a ``BadToken`` naming ``where`` it came from.

    Clients strip a header's surrounding whitespace and cannot send a line break, so a blank token, or one
    starting or ending with a space, could never match: the daemon would start and refuse everyone. gRPC
    metadata carries only printable ASCII (a token with ``Ü`` worked over HTTP and failed every gRPC export as
    INTERNAL). A space inside is sent by both."""
    if not token.strip():
        raise BadToken(f"{where} is blank: no client could ever send it")
    if token != token.strip(" "):
        raise BadToken(f"{where} starts or ends with a space, which clients strip from the header")
    if any(not (" " <= c <= "~") for c in token):
        raise BadToken(f"{where} holds a control or a non-ASCII character: HTTP clients cannot send some of these, "
                       "and gRPC metadata carries only printable ASCII")
    return token


def open_store(url: str | None, db: Path | None, token: str | None) -> StoreClient:
    """The daemon when it answers; else the default store file, read-only."""
    url, db = _command_line_wins(url, db)
    if url and db:
        raise click.UsageError("give --url or --db, not both")
    meta = click.get_current_context().meta if click.get_current_context(silent=True) else {}
    lake, lake_data = meta.get("lousho.observe.lake"), meta.get("lousho.observe.lake_data")
    if lake is not None or lake_data is not None:
        return _lake_store(lake, lake_data, url or db)
    token = _token(token, meta.get("lousho.observe.token_file"))
    ca_cert = meta.get("lousho.observe.ca_cert")
    if db is not None:
        return connect(db)
    if url is not None:
        return connect(url, token=token, ca_cert=ca_cert)
    client = DaemonClient(DEFAULT_URL, token=token)
    if client.healthy():
        return client
    if DEFAULT_DB.exists():
        return connect(DEFAULT_DB)
    raise DaemonUnreachable(f"no daemon answers at {DEFAULT_URL} and there is no {DEFAULT_DB}")


def _command_line_wins(url: str | None, db: Path | None) -> tuple[str | None, Path | None]:
    """With one of --url / --db from the command line and the other from its variable (LOUSHO_URL,
    LOUSHO_DB), the flag typed now wins: the variable is a default, not a second choice."""
    if not (url and db):
        return url, db
    sources = {name: _source(name) for name in ("url", "db")}
    if sources["url"] is ParameterSource.COMMANDLINE and sources["db"] is ParameterSource.ENVIRONMENT:
        return url, None
    if sources["db"] is ParameterSource.COMMANDLINE and sources["url"] is ParameterSource.ENVIRONMENT:
        return None, db
    return url, db


def _source(name: str) -> ParameterSource | None:
    """Where the nearest command that has option ``name`` took its value from (a sub-command's or its group's)."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if name in ctx.params:
            return ctx.get_parameter_source(name)
        ctx = ctx.parent
    return None


def _format(as_json: bool, as_csv: bool) -> str:
    if as_json and as_csv:
        raise click.UsageError("give --json or --csv, not both")
    return "json" if as_json else "csv" if as_csv else "table"


@click.command()
@target_options
@click.option("--json", "as_json", is_flag=True, help="One JSON array of row objects.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV with a header row.")
@click.option("--allow-truncated", is_flag=True,
              help="Exit 0 when the daemon's row cap cut the result short (the warning still prints).")
@click.argument("query")
def sql(url: str | None, db: Path | None, token: str | None, as_json: bool, as_csv: bool,
        allow_truncated: bool, query: str) -> None:
    """Run one read-only SQL query over the store (tables spans, scores; view runs).

    Values print as the SQL API's JSON answer maps them (docs/observe.md). When the daemon's row cap
    cut the result short, the rows print, a warning goes to stderr and the exit status is 1, unless
    --allow-truncated.
    """
    fmt = _format(as_json, as_csv)
    store = open_store(url, db, token)
    try:
        result = _printable(store, fmt, query)
    finally:
        store.close()
    count = _print_result(result, fmt)
    if result.truncated:
        truncated = SqlTruncated(f"the daemon returned only the first {count} rows of the result")
        if not allow_truncated:
            raise truncated
        click.echo(f"warning {truncated.code}: {truncated.message}", err=True)


def _printable(store: StoreClient, fmt: str, query: str,
               params: list[Any] | None = None) -> SqlAnswer | CsvAnswer | QueryResult:
    """The result of ``query`` in the form ``fmt`` prints from. The daemon maps the values to their JSON form, or
    writes the CSV, itself: printing its answer needs no pyarrow (0.2 s of start-up) nor Polars, and a file
    store's result is printed the same way (sql_json, sql_csv)."""
    if not isinstance(store, DaemonClient):
        return store.fetch(query, params)
    return store.csv(query, params) if fmt == "csv" else store.answer(query, params)


def _print_result(result: SqlAnswer | CsvAnswer | QueryResult, fmt: str) -> int:
    """Print what ``_printable`` fetched; returns how many rows."""
    if isinstance(result, CsvAnswer):
        out = click.get_binary_stream("stdout")
        out.write(result.text)
        out.flush()
        return result.rows
    if isinstance(result, SqlAnswer):
        print_answer(result, fmt)
        return len(result.rows)
    print_table(result.table, fmt)
    return result.table.num_rows


def _lake_store(lake: str | None, lake_data: Path | None, other: object) -> StoreClient:
    from lousho.observe.client.store_client import LakeStoreClient

    if lake is None or lake_data is None:
        raise click.UsageError("--lake and --lake-data go together")
    if other is not None:
        raise click.UsageError("give --lake or --url/--db, not both")
    ctx = click.get_current_context(silent=True)
    if ctx is not None and urllib.parse.urlsplit(lake).password and _given_on_command_line(ctx, "lake"):
        click.echo("lousho: warning: the password in --lake is visible to every user of this machine in the "
                   "process list; use ~/.pgpass (PGPASSFILE) instead", err=True)
    return LakeStoreClient(lake, Path(lake_data))


def _given_on_command_line(ctx: click.Context, name: str) -> bool:
    while ctx is not None:
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            return True
        ctx = ctx.parent  # type: ignore[assignment]
    return False


RUN_COLUMNS = (
    "run_id, agent, harness_revision, case_id, status, passed, attempts, started_at, "
    "duration_s, input_tokens, output_tokens, cost_usd, model_calls, tool_calls, error_type, "
    "error_message, probe, healed_from, model, provider, cache_read_tokens, cache_creation_tokens, "
    "reasoning_tokens, cost_source, conversation_id, revision_source, handled_errors"
)
# What `lousho runs` shows as a table.
RUN_TABLE_COLUMNS = ("run_id, agent, harness_revision, status, passed, attempts, started_at, model, input_tokens, "
                     "output_tokens, cost_usd, error_type")


class RunsGroup(click.Group):
    # Options of the listing itself (``lousho runs``), not of its sub-commands; the store options
    # (target_options) are taken by both, before or after the sub-command (tests/test_cli_group_options.py).
    listing_only = ("agent", "failed", "limit", "as_json")


@click.group(cls=RunsGroup, invoke_without_command=True)
@target_options
@click.option("--agent", default=None, help="Only this agent's runs.")
@click.option("--failed", is_flag=True, help="Only runs that errored or failed their check.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON array of run objects.")
@click.pass_context
def runs(ctx: click.Context, url: str | None, db: Path | None, token: str | None,
         agent: str | None, failed: bool, limit: int, as_json: bool) -> None:
    """List runs, newest first; `lousho runs show RUN_ID` shows one."""
    ctx.obj = {"url": url, "db": db, "token": token}
    if ctx.invoked_subcommand is not None:
        _refuse_listing_options(ctx)
        return
    store = open_store(url, db, token)
    try:
        if as_json:
            frame = newest_runs(store, agent=agent, failed=failed, limit=limit)
            empty = frame.height == 0
        else:
            # The table prints as `lousho sql` prints one, so it needs no Polars (0.08 s of the 0.3 s the listing
            # may take), and asks only for the columns it shows (12 of the 27).
            table = _printable(store, "table", *newest_runs_query(RUN_TABLE_COLUMNS, agent=agent, failed=failed,
                                                                   limit=limit))
            empty = not (table.rows if isinstance(table, SqlAnswer) else table.table.num_rows)
        empty_note = why_no_runs(store, agent) if empty and not failed else None
    finally:
        store.close()
    if as_json:
        print_frame(frame, "json")
    else:
        _print_result(table, "table")
    if empty_note:
        click.echo(empty_note, err=True)


def _refuse_listing_options(ctx: click.Context) -> None:
    """``lousho runs --json show ID`` printed the table: the listing's options before a sub-command were
    dropped without a word. Refuse them, naming where they go."""
    given = [option for option in ctx.command.params
             if option.name in RunsGroup.listing_only
             and ctx.get_parameter_source(option.name or "") is ParameterSource.COMMANDLINE]
    if given:
        flags = ", ".join(option.opts[0] for option in given)
        sub = ctx.invoked_subcommand
        raise click.UsageError(f"{flags} before `{sub}` would be ignored: they are the listing's; give the "
                               f"sub-command's own options after it (lousho runs {sub} --help)")


def newest_runs(store: StoreClient, *, agent: str | None, failed: bool, limit: int) -> pl.DataFrame:
    """The ``limit`` newest runs (of ``agent``; only failed ones with ``failed``), newest first; with its
    columns when no run matches."""
    return store.frame(*newest_runs_query(RUN_COLUMNS, agent=agent, failed=failed, limit=limit))


@runs.command("show")
@click.argument("run_id")
@target_options
@click.option("--json", "as_json", is_flag=True, help="The run, its spans and scores as JSON.")
@click.option("--width", type=click.IntRange(min=40), default=None,
              help="Columns to print in (default: the terminal's, 200 for a pipe).")
@click.pass_context
def runs_show(ctx: click.Context, run_id: str, url: str | None, db: Path | None, token: str | None, as_json: bool,
              width: int | None) -> None:
    """One run: its summary, span tree (every attempt) and scores."""
    store = open_store(**group_target(ctx, url=url, db=db, token=token))
    try:
        run = store.frame(f"SELECT {RUN_COLUMNS}, input, output, last_trace_id FROM ({runs_select('run_id = ?')})",
                        [run_id])
        if run.height == 0:
            raise RunNotFound(f"no run {run_id!r} in {store.target}")
        # A run without lousho.run.id is its one trace, the last (and only) one the row names.
        traces = "SELECT DISTINCT trace_id FROM spans WHERE run_id = ? UNION SELECT ?"
        last = run["last_trace_id"][0]
        run = run.drop("last_trace_id")
        spans = store.frame(
            "SELECT trace_id, span_id, parent_span_id, name, operation, status_code, "
            "status_message, start_ns, duration_ns, input_tokens, output_tokens, tool_name, "
            "coalesce(response_model, request_model) AS model, "
            f"events FROM spans WHERE trace_id IN ({traces}) ORDER BY start_ns", [run_id, last])
        scores = store.frame(
            "SELECT trace_id, span_id, name, score_value, score_label, passed, failed_check, "
            f"explanation FROM scores WHERE trace_id IN ({traces}) ORDER BY time_ns", [run_id, last])
    finally:
        store.close()
    if as_json:
        doc = {
            "run": json.loads(run.write_json())[0],
            "spans": json.loads(spans.write_json()) if spans.height else [],
            "scores": json.loads(scores.write_json()) if scores.height else [],
        }
        click.echo(json.dumps(doc, sort_keys=True, default=str))
        return
    _print_run(run, spans, scores, width)


def _print_run(run: pl.DataFrame, spans: pl.DataFrame, scores: pl.DataFrame, width: int | None) -> None:
    from rich.console import Console

    from lousho.observe.runs.run_summary import print_run

    models = list(dict.fromkeys(m for m in spans["model"] if m))
    console = table_console() if width is None else Console(width=width, highlight=False, markup=False,
                                                             emoji=False)
    row = run.row(0, named=True)
    row["error_message"] = first_line(row["error_message"])  # the whole text: --json and the page
    print_run(console, row, models, span_tree(spans.iter_rows(named=True), scores.iter_rows(named=True)))


ERROR_LINE_CHARS = 200


def first_line(text: str | None) -> str | None:
    """An error's first non-blank line, cut at ERROR_LINE_CHARS: a traceback's summary, not its frames."""
    if not text:
        return text
    # Lines end at \n alone: str.splitlines() also ends one at \r, \x1c, \x85 and the like, which would hide
    # what follows them on the line a terminal shows (the rest is escaped as visible text when printed).
    line = next((part.strip() for part in text.split("\n") if part.strip()), "")
    return line if len(line) <= ERROR_LINE_CHARS else line[: ERROR_LINE_CHARS - 1] + "…"


def span_tree(spans: Iterable[dict[str, Any]], scores: Iterable[dict[str, Any]]) -> Tree:
    """The spans under their parents, children by start time. Every label is ``safe_text``: names, messages and
    check names are the agent's text.

    Built from the parent links, not from the start order: a span that starts in the same millisecond as its
    parent (an SDK with millisecond clocks, or clocks read in a different order) may sort before it. An error
    shows its first line once, on the span where it arose: an ancestor that carries the same message shows only
    its status, and a later span with it says "same error as above".
    """
    from rich.tree import Tree

    from lousho.kernel.text_safety import safe_text

    rows = list(spans)
    ids = {row["span_id"] for row in rows}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["start_ns"] or 0, r["span_id"])):
        parent = row["parent_span_id"] if row["parent_span_id"] in ids else None
        children.setdefault(parent, []).append(row)
    by_span: dict[str, list[dict[str, Any]]] = {}
    for score in scores:
        by_span.setdefault(score["span_id"], []).append(score)
    below: dict[str, set[str]] = {}  # the error lines of each span's descendants

    def errors_below(row: dict[str, Any]) -> set[str]:
        below[row["span_id"]] = found = set()  # set first: a cycle of parent links ends here
        for child in children.get(row["span_id"], []):
            if child["span_id"] not in below:
                found |= errors_below(child)
            if child["status_message"]:
                found.add(first_line(child["status_message"]) or "")
        return found

    tops = list(children.get(None, []))
    for top in tops:
        errors_below(top)
    # Spans in a cycle of parent links reach no top: drawn at the top rather than dropped.
    for row in rows:
        if row["span_id"] not in below:
            tops.append(row)
            errors_below(row)
    shown: set[str] = set()
    drawn: set[str] = set()
    root = Tree(safe_text("spans"))
    stack = [(root, row) for row in reversed(tops)]
    while stack:
        parent_node, row = stack.pop()
        if row["span_id"] in drawn:
            continue
        drawn.add(row["span_id"])
        ms = (row["duration_ns"] or 0) / 1e6
        label = f"{row['name']}  [{row['status_code']}] {ms:.1f} ms"
        line = first_line(row["status_message"])
        if line and line not in below.get(row["span_id"], set()):
            label += "  (same error as above)" if line in shown else f"  {line}"
            shown.add(line)
        node = parent_node.add(safe_text(label))
        for score in by_span.get(row["span_id"], []):
            verdict = {True: "pass", False: "fail"}.get(score["passed"], score["score_label"])
            extra = f" (failed check: {score['failed_check']})" if score["failed_check"] else ""
            node.add(safe_text(f"score {score['name']} = {score['score_value']} {verdict}{extra}"))
        stack.extend((node, child) for child in reversed(children.get(row["span_id"], [])))
    return root
