"""The daemon's web page: runs, one run's span tree, an agent's pass rates, monitor and audit log, recovery.

Server-rendered HTML with inline SVG and one same-origin stylesheet; no script, nothing fetched from
elsewhere (the CSP says so too). Routes, all GET:

- ``/``: the newest runs, filtered by ``agent``, ``revision`` and ``failed`` (query parameters);
- ``/runs/{run_id}``: one run: summary, span tree of every attempt with its events, scores;
  ``?value=input`` (``output``, ``error``): that value whole, as text;
- ``/spans/{trace_id}/{span_id}``: one span's attributes, or one of them, whole, as text (``page.values``);
- ``/agents`` and ``/agents/{name}``: pass rate by revision over time; for agents registered with
  ``--agent``, the monitor's path for the watched edit (``?edit=N``: the apply on audit line N) and the
  audit log with its chain verdict;
- ``/recovery``: the run store of ``--recover-store``: pending and quarantined runs, the outage breaker.

Every list comes in pages (``?page=N``, ``page.paging``) and every long value as an excerpt with a link
to the whole (``page.values``), so no page grows with the store.

The token: see ``page.auth`` (the bearer header, or ``?token=`` once, which sets a cookie).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from lousho.kernel.errors import UsageError
from lousho.observe.errors import ObserveError
from lousho.observe.trigger.cycle import AgentSpec
from lousho.page.auth import PageToken, SecurityHeaders
from lousho.page.data import (
    SPANS_PER_PAGE,
    Reader,
    agent_names,
    agents,
    newest_runs,
    revisions,
    run_detail,
    run_value,
    span_values,
)
from lousho.page.html import CSS, CSS_PATH, Safe, el, join, layout, number, segment, short, table, when
from lousho.page.paging import page_of, pager
from lousho.page.recover import RecoveryState, read_state
from lousho.page.run import render_run
from lousho.page.runs import MAX_LIMIT, filters, runs_table, why_empty
from lousho.page.sessions import newest_sessions, render_sessions
from lousho.page.values import BadValueParameter, event_index, full_value

DEFAULT_LIMIT = 100
AGENTS_PER_PAGE = 100
# ``?value=`` of a run page: the run's columns it may answer whole.
_RUN_VALUES = {"input": "input", "output": "output", "error": "error_message"}

_EXACT = frozenset({"/", "/sessions", "/agents", "/recovery", CSS_PATH, "/favicon.ico"})
_PREFIXES = ("/runs/", "/agents/", "/spans/")


def is_page_path(path: str) -> bool:
    return path in _EXACT or path.startswith(_PREFIXES)


def build_page(
    reader_factory: Callable[[], duckdb.DuckDBPyConnection],
    *,
    token: str | None = None,
    agents_registered: Sequence[AgentSpec] = (),
    recover_store: Path | None = None,
    sql_timeout_s: float = 30.0,
    open_reader: Callable[[float], Reader] | None = None,
) -> ASGIApp:
    """The page as an ASGI app, behind its token check and security headers. ``open_reader`` (given a time limit)
    replaces the store's cursor: the fleet's lake for a daemon with ``--page-scope lake``."""
    registered = {a.name: a for a in agents_registered}

    async def with_reader(render: Callable[[Reader], Response]) -> Response:
        def work() -> Response:
            reader = (open_reader(sql_timeout_s) if open_reader is not None
                      else Reader.open(reader_factory, sql_timeout_s))
            try:
                return render(reader)
            finally:
                reader.close()

        try:
            return await run_in_threadpool(work)
        except ObserveError as e:
            body = join([el("h1", "The store could not answer"), el("p", e.message, cls="note bad"),
                         el("p", e.hint, cls="muted")])
            return HTMLResponse(layout("error", body), status_code=503)

    async def runs_page(request: Request) -> Response:
        q = request.query_params
        agent, revision = q.get("agent") or None, q.get("revision") or None
        failed = q.get("failed") in ("1", "on", "true")
        limit = _limit(q.get("limit"))
        page = page_of(q.get("page"), limit)

        def render(reader: Reader) -> Response:
            rows = newest_runs(reader, agent=agent, revision=revision, failed=failed, limit=limit + 1,
                               offset=page.offset)
            form = filters(sorted(set(registered) | set(agent_names(reader))),
                            revisions(reader, agent), agent, revision, failed, limit)
            pages = pager("/", page, len(rows) > limit, agent=agent, revision=revision, failed="1" if failed else None,
                          limit=limit if limit != DEFAULT_LIMIT else None)
            body = join([el("h1", "Runs"), form, runs_table(rows[:limit], limit), pages])
            if not rows and not failed and not revision and page.number == 1:
                body = join([body, why_empty(reader, agent)])
            return HTMLResponse(layout("runs", body, active="/"))

        return await with_reader(render)

    async def sessions_page(request: Request) -> Response:
        agent = request.query_params.get("agent") or None
        limit = _limit(request.query_params.get("limit"))
        page = page_of(request.query_params.get("page"), limit)

        def render(reader: Reader) -> Response:
            rows = newest_sessions(reader, agent, limit + 1, page.offset)
            pages = pager("/sessions", page, len(rows) > limit, agent=agent,
                          limit=limit if limit != DEFAULT_LIMIT else None)
            return HTMLResponse(layout("sessions", render_sessions(rows[:limit], pages), active="/sessions"))

        return await with_reader(render)

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        value = request.query_params.get("value")
        if value is not None:
            return await run_value_page(run_id, value)
        page = page_of(request.query_params.get("page"), SPANS_PER_PAGE)

        def render(reader: Reader) -> Response:
            run, spans, scores = run_detail(reader, run_id, page.offset)
            if run is None:
                return _no_such_run(run_id)
            return HTMLResponse(layout(f"run {run_id}", render_run(run, spans, scores, page)))

        return await with_reader(render)

    async def run_value_page(run_id: str, value: str) -> Response:
        if value not in _RUN_VALUES:
            raise BadValueParameter(f"value={value[:40]!r} is none of {', '.join(_RUN_VALUES)}")

        def render(reader: Reader) -> Response:
            found, text = run_value(reader, run_id, _RUN_VALUES[value])
            return _no_such_run(run_id) if not found else PlainTextResponse(text or "")

        return await with_reader(render)

    async def span_value_page(request: Request) -> Response:
        trace_id, span_id = request.path_params["trace_id"], request.path_params["span_id"]
        q = request.query_params
        event, attribute = event_index(q.get("event")), q.get("attribute")
        everything = q.get("events")
        if everything not in (None, "all") or (everything and (event is not None or attribute is not None)):
            raise BadValueParameter("events=all takes no event or attribute")

        def render(reader: Reader) -> Response:
            found, stored = span_values(reader, trace_id, span_id, "attributes" if event is None and not everything
                                        else "events")
            text = (stored or "[]") if found and everything else full_value(stored, event, attribute) if found else None
            if text is None:
                what = "span" if not found else "event" if attribute is None else "attribute"
                return PlainTextResponse(f"LOUSHO_PAGE_NO_SUCH_VALUE: the span {trace_id}/{span_id} has no such "
                                         f"{what}\n", status_code=404)
            return PlainTextResponse(text)

        return await with_reader(render)

    async def agents_page(request: Request) -> Response:
        page = page_of(request.query_params.get("page"), AGENTS_PER_PAGE)

        def render(reader: Reader) -> Response:
            found = agents(reader, sorted(registered), page.size, page.offset)
            rows = [[el("a", short(a["agent"], 200), href="/agents/" + segment(a["agent"])),
                     el("code", str(registered[a["agent"]].directory)) if a["agent"] in registered else el(
                         "span", "not registered", cls="muted"),
                     el("td", number(a["runs"]), cls="num"), when(a["last_ns"])] for a in found]
            total = found[0]["total"] if found else 0
            caption = (f"agents {page.offset + 1:,} to {page.offset + len(found):,} of {total:,}, by name"
                       if found else "No agents on this page.")
            pages = pager("/agents", page, page.offset + len(found) < total)
            body = join([el("h1", "Agents"), el("p", caption, cls="muted"), pages,
                         table(["agent", "directory (--agent)", "runs", "last run (UTC)"], rows, id="agents"), pages])
            return HTMLResponse(layout("agents", body, active="/agents"))

        return await with_reader(render)

    async def agent_page(request: Request) -> Response:
        name = request.path_params["name"]
        edit = request.query_params.get("edit", "")
        edit_line = int(edit) if edit.isdigit() and len(edit) < 12 else None
        # Here, not at the top: the agent page reads analysis (SciPy), which the daemon need not load to start.
        from lousho.page.agent import render_agent

        return await with_reader(lambda reader: HTMLResponse(
            layout(f"agent {name}", render_agent(reader, name, registered.get(name), edit_line), active="/agents")))

    async def recovery_page(request: Request) -> Response:
        if recover_store is None:
            body = join([el("h1", "Recovery"), el("p", "No run store given: start the daemon with ",
                                                  el("code", "--recover-store sqlite:///.lousho/runs.db"),
                                                  " to see pending and quarantined runs and the outage state.",
                                                  cls="note")])
            return HTMLResponse(layout("recovery", body, active="/recovery"))
        try:
            state = await run_in_threadpool(read_state, recover_store)
        except (OSError, sqlite3.Error) as e:
            body = join([el("h1", "Recovery"), el("p", f"The run store {recover_store} cannot be read: {e}",
                                                  cls="note bad")])
            return HTMLResponse(layout("recovery", body, active="/recovery"), status_code=503)
        return HTMLResponse(layout("recovery", _recovery(state, recover_store), active="/recovery"))

    async def css(request: Request) -> Response:
        return Response(CSS, media_type="text/css")

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    routes = [
        Route("/", bad_request_said(runs_page), methods=["GET"]),
        Route("/runs/{run_id:path}", bad_request_said(run_page), methods=["GET"]),
        Route("/sessions", bad_request_said(sessions_page), methods=["GET"]),
        Route("/spans/{trace_id}/{span_id}", bad_request_said(span_value_page), methods=["GET"]),
        Route("/agents", bad_request_said(agents_page), methods=["GET"]),
        Route("/agents/{name:path}", agent_page, methods=["GET"]),
        Route("/recovery", recovery_page, methods=["GET"]),
        Route(CSS_PATH, css, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
    ]
    return SecurityHeaders(PageToken(Starlette(routes=routes), token))


def bad_request_said(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with a bad query parameter answered as a coded 400 page, not a 500."""

    async def checked(request: Request) -> Response:
        try:
            return await handler(request)
        except UsageError as e:
            body = join([el("h1", "Bad request"), el("p", el("code", e.code), ": ", e.message, cls="note bad",
                                                     id="error-code"), el("p", e.hint, cls="muted")])
            return HTMLResponse(layout("bad request", body), status_code=400)

    return checked


def _no_such_run(run_id: str) -> Response:
    body = join([el("h1", "No such run"), el("p", "The store has no run ", el("code", short(run_id, 200)), ".")])
    return HTMLResponse(layout("no such run", body), status_code=404)


def _limit(raw: str | None) -> int:
    # Length first: int() refuses strings past 4,300 digits with a ValueError.
    return min(max(int(raw), 1), MAX_LIMIT) if raw and raw.isdigit() and len(raw) < 8 else DEFAULT_LIMIT


def _recovery(state: RecoveryState, path: Path) -> Safe:
    parts = [el("h1", "Recovery"), el("p", "Run store ", el("code", str(path)), cls="muted")]
    outage = state.outage
    if outage is None:
        parts.append(el("p", "This run store has no outage breaker table (an older schema).", cls="note warn"))
    elif outage.paused:
        error = outage.last_error or {}
        text = (f"provider outage: recovery paused since {outage.paused_since} ({error.get('code')}: "
                f"{error.get('message')}); {outage.probes} failed probe(s), next probe at {outage.next_probe_at}")
        if outage.probe_owner:
            text += f"; probe held by {outage.probe_owner} until {outage.probe_expiry} (run {outage.probe_run})"
        parts.append(el("p", el("strong", text), cls="note bad", id="outage"))
    else:
        parts.append(el("p", f"no provider outage ({outage.failures} provider failure(s) in a row)",
                        cls="note ok", id="outage"))
    counts = [[status, el("td", number(n), cls="num")] for status, n in sorted(state.counts.items())]
    parts.extend([el("h2", "Runs by status"), table(["status", "runs"], counts, id="status-counts", cls="narrow")])
    parts.extend([el("h2", f"Quarantined ({len(state.quarantined)})"), _recover_runs(state.quarantined, "quarantined")])
    parts.extend([el("h2", f"Pending: unfinished, not quarantined ({len(state.pending)})"),
                  _recover_runs(state.pending, "pending")])
    approvals = [[el("code", a["id"]), el("a", el("code", a["run_id"]), href="/runs/" + segment(a["run_id"])),
                  a["kind"], a["tool_name"], a["created_at"]] for a in state.approvals]
    parts.extend([el("h2", f"Approvals waiting for a person ({len(approvals)})"),
                  table(["approval", "run", "kind", "tool", "asked at"], approvals, id="approvals")
                  if approvals else el("p", "None.", cls="muted")])
    return join(parts)


def _recover_runs(runs: list[dict[str, Any]], table_id: str) -> Safe:
    if not runs:
        return el("p", "None.", cls="muted")
    rows = []
    for r in runs:
        error = r.get("last_error") or {}
        message = f"{error.get('code', '')}: {error.get('message', '')}" if error else ""
        if error.get("category"):
            message += f" ({error['category']})"
        rows.append([el("a", el("code", r["id"]), href="/runs/" + segment(r["id"])), r.get("agent"), r.get("kind"),
                     el("span", r["status"], cls="badge bad" if r["status"] == "quarantined" else "badge warn"),
                     el("td", r.get("attempts"), cls="num"), el("td", r.get("consecutive_failures"), cls="num"),
                     short(message, 160), r.get("next_attempt_at"),
                     r.get("lease_owner") and f"{r['lease_owner']} until {r.get('lease_expiry')}",
                     r.get("healed_from"), r.get("updated_at")])
    return table(["run", "agent", "kind", "status", "attempts", "failures in a row", "last error", "next attempt",
                  "held by", "healed from", "updated"], rows, id=table_id)
