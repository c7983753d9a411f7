"""The page of one agent: pass rate by harness revision over time, the monitor's path for an applied edit,
and the audit log of its directory (when the agent is registered with ``--agent NAME=DIR:CHECK``)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from lousho.analysis.clustered import interval_from_cluster_sums
from lousho.analysis.monitor import MonitorConfig
from lousho.analysis.monitor_path import MonitorPath
from lousho.improve.applied_edit import AppliedEdit
from lousho.observe.trigger.cycle import AgentSpec, read_records, read_state
from lousho.page.agentdir import SHOWN_ENTRIES, AuditLog, applied_edits, read_audit, watched_edit
from lousho.page.data import Reader, monitor_arms, pass_rate_bins, revision_clusters
from lousho.page.html import Safe, dl, el, href, join, number, segment, short, table, when
from lousho.page.svg import RateBin, legend, monitor_chart, pass_rate_chart

# The watched edit's statuses while the watcher still judges it (improve's cycle: "still under watch").
_WATCHING = frozenset({"monitoring", "traffic"})
# Applied edits the monitor section links (the newest); ?edit=N still opens any of them.
SHOWN_EDITS = 50


def render_agent(reader: Reader, name: str, spec: AgentSpec | None, edit_line: int | None) -> Safe:
    parts = [el("h1", "Agent ", name)]
    if spec is not None:
        parts.append(dl({"directory": el("code", str(spec.directory)), "check": el("code", str(spec.check))}))
    parts.append(el("p", el("a", "its runs", href=href("/", agent=name)), " · ",
                    el("a", "its failed runs", href=href("/", agent=name, failed="1"))))
    parts.append(el("h2", "Pass rate by harness revision"))
    parts.append(_pass_rates(reader, name))
    parts.append(el("h2", "Monitor"))
    if spec is None:
        parts.append(el("p", "Register the agent's directory with the daemon (", el("code", "--agent NAME=DIR:CHECK"),
                        ") to see its applied edit and audit log.", cls="note"))
        return join(parts)
    audit = read_audit(spec.state_dir)
    parts.append(_monitor(reader, name, spec, audit, edit_line))
    parts.append(el("h2", "Regression trigger"))
    parts.append(_detector(spec))
    parts.append(el("h2", "Cycles the daemon started"))
    parts.append(_cycles(spec))
    parts.append(el("h2", "Audit log"))
    parts.append(_audit(audit))
    return join(parts)


def _pass_rates(reader: Reader, name: str) -> Safe:
    bins = pass_rate_bins(reader, name)
    if not bins:
        return el("p", "No scored runs yet (probe runs of the improve loop are left out).", cls="muted")
    series: dict[str, list[RateBin]] = {}
    start = 0
    for b in bins:  # revisions in the order of their first run, each one's bins in run order
        series.setdefault(b["revision"], []).append(RateBin(start, b["scored"], b["passes"], b["first_ns"],
                                                            b["last_ns"]))
        start += b["scored"]
    names = list(series)
    intervals = _intervals(reader, name, names)
    rows = []
    for revision, points in series.items():
        passes, scored = sum(p.passes for p in points), sum(p.scored for p in points)
        interval = intervals.get(revision)
        rows.append([el("a", el("code", revision), href=href("/", agent=name, revision=revision)),
                     el("td", number(scored), cls="num"), el("td", number(passes), cls="num"),
                     el("td", f"{passes / scored:.1%}", cls="num"),
                     el("td", "—" if interval is None else f"{interval[0]:.1%} – {interval[1]:.1%}", cls="num"),
                     el("td", "—" if interval is None else number(interval[2]), cls="num"),
                     when(points[0].first_ns), when(points[-1].last_ns)])
    more = bins[0]["revisions"] - len(series)
    note = el("p", f"The {len(series)} revisions with the newest runs; {more:,} older one(s) left out.",
              cls="muted") if more > 0 else join([])
    how = el("p", "The 95% interval is cluster-robust: a session's runs are one cluster (else a case's, else "
                  "each run its own), as runs of one session share a case and often an outcome; it covers "
                  "0.94–0.96 in sessions from 60 to 1,000 runs at true rates 0.6–0.95, "
                  "where Wilson's covers 0.62–0.93 (docs/statistics.md §8).", cls="muted", id="pass-rate-interval")
    return join([note, pass_rate_chart(list(series.items()), start), legend(names),
                 table(["revision", "scored runs", "passed", "pass rate", "95% interval", "clusters",
                        "first run (UTC)", "last run (UTC)"], rows, id="pass-rates"), how])


def _intervals(reader: Reader, name: str, revisions: list[str]) -> dict[str, tuple[float, float, int]]:
    """(low, high, clusters) by revision: ``analysis.pass_rates``' interval, from the store's cluster sums."""
    found = revision_clusters(reader, name, revisions)
    if not found:
        return {}
    rows = list(found.values())
    scored = np.array([r["scored"] for r in rows], dtype=float)
    low, high, _ = interval_from_cluster_sums(
        scored, np.array([r["passes"] for r in rows]) / scored, np.array([r["s2"] for r in rows]),
        np.array([r["s4"] for r in rows]), np.array([r["clusters"] for r in rows]), np.array([r["m2"] for r in rows]))
    return {r["revision"]: (float(lo), float(hi), int(r["clusters"])) for r, lo, hi in zip(rows, low, high,
                                                                                             strict=True)}


def _monitor(reader: Reader, name: str, spec: AgentSpec, audit: AuditLog, edit_line: int | None) -> Safe:
    edits = applied_edits(audit)
    watched = watched_edit(spec.state_dir)
    parts: list[Any] = []
    if isinstance(watched, str):
        parts.append(el("p", watched, cls="note bad"))
        watched = None
    chosen, why = edit_that_matters(watched, edits, kept_revisions(audit))
    if edit_line is not None:
        picked = next((e for n, e in edits if n == edit_line), None)
        if picked is None:
            parts.append(el("p", f"Audit line {edit_line} is not an apply; showing {why}.", cls="note warn"))
        else:
            chosen, why = picked, f"audit line {edit_line}, as asked"
    if chosen is not None:
        parts.append(el("p", "Showing ", el("strong", why), ": ", el("code", chosen.before), " → ",
                        el("code", chosen.after), cls="note", id="monitor-edit", data_after=chosen.after))
    if chosen is None:
        parts.append(el("p", "No applied edit yet: state.json watches none and the audit log has no apply.",
                        cls="muted"))
    else:
        parts.append(_edit_path(reader, name, chosen))
    if edits:
        links = [el("li", el("a", f"audit line {n}: ", el("code", e.before), " → ", el("code", e.after),
                             href=href("/agents/" + segment(name), edit=n)), f" at {e.applied_at.isoformat()}")
                 for n, e in edits[-SHOWN_EDITS:]]
        shown = f" (the last {SHOWN_EDITS} listed)" if len(edits) > SHOWN_EDITS else ""
        parts.append(el("details", el("summary", f"{len(edits)} applied edit(s) in the audit log{shown}"),
                        el("ul", *links), open=True, id="applied-edits"))
    return join(parts)


def kept_revisions(audit: AuditLog) -> set[str]:
    """Revisions the loop kept after watching them (the monitor's keep, or kept unverified at its age)."""
    return {str(entry.get("revision")) for _, entry in audit.entries
            if entry is not None and entry.get("action") in ("kept", "kept-unverified")}


def edit_that_matters(watched: AppliedEdit | None, edits: list[tuple[int, AppliedEdit]],
                      kept: set[str]) -> tuple[AppliedEdit | None, str]:
    """The edit an agent's page shows first, and why: the one the watcher judges now; else the last edit
    the loop kept (the harness runs on it), not a later edit that was rolled back; else the last applied."""
    if watched is not None and (watched.status is None or watched.status in _WATCHING):
        return watched, f"the edit being watched ({watched.status or 'watched'})"
    last_kept = next((e for _, e in reversed(edits) if e.after in kept), None)
    if last_kept is not None:
        return last_kept, "the last kept edit"
    if watched is not None:
        return watched, f"the last watched edit ({watched.status})"
    if edits:
        return edits[-1][1], "the last applied edit"
    return None, "no edit"


def _edit_path(reader: Reader, name: str, edit: AppliedEdit) -> Safe:
    # The watcher's config (its design, rule and looks), on the arms its monitor reads: the path drawn is the
    # statistic of the design that decides, and a concurrent watch without held-back runs shows as stratified.
    config = MonitorConfig(design=edit.design or "concurrent")
    path = MonitorPath.of_arms(monitor_arms(reader, name, edit, config), config)
    info = dl({
        "edit": join([el("code", edit.before), " → ", el("code", edit.after)]),
        "applied at": edit.applied_at.isoformat(),
        "from": edit.source,
        "status": edit.status,
        "reason": edit.reason,
        "design": path.design_label,
        "runs": _arm_runs(path),
    })
    tone = {"rollback": "bad", "keep": "ok"}.get(path.action, "warn")
    parts = [info]
    if edit.status is not None and edit.status not in _WATCHING:
        # The loop decided already (the monitor, the corpus guard or a person): the path is history.
        parts.append(el("p", f"This edit is {edit.status}: the monitor no longer watches it.", cls="note"))
    parts.append(el("p", "The monitor's rule on these runs: ", el("strong", path.conclusion()), cls=f"note {tone}",
                    id="monitor-conclusion"))
    if path.points:
        parts.append(monitor_chart(path))
        bounds = path.config.boundary.z
        rows = [[el("td", p.look, cls="num"), el("td", f"{p.base_passes}/{p.n}", cls="num"),
                 el("td", f"{p.applied_passes}/{p.applied_runs}", cls="num"), el("td", f"{p.drop:+.3f}", cls="num"),
                 el("td", f"{p.z:.2f}", cls="num"), el("td", f"{bounds[p.look - 1]:.2f}", cls="num"),
                 el("span", "roll back", cls="badge bad") if p.crosses else el("span", "no", cls="muted")]
                for p in path.at_looks()]
        if rows:
            header = ["look", "base passed", "applied passed", "drop", f"{path.design} z", "bound", "crosses"]
            parts.append(table(header, rows, id="monitor-looks"))
    else:
        parts.append(el("p", "No path to draw yet: the first look needs runs on both sides.", cls="muted"))
    return join(parts)


def _arm_runs(path: MonitorPath) -> str:
    """What each arm holds, and how a run without a verdict counts in the design."""
    counted = ("scored runs only: a run without a verdict (a crash) is not seen" if path.design == "seed" else
               "a run without a verdict (a crash, a no-progress stop) counts as a failure")
    if path.design == "concurrent":
        return (f"base {path.base_runs} in the held-back sessions since the apply, applied {path.applied_runs} "
                f"since; {counted}")
    return (f"base {path.base_runs} (the newest before the apply, at most {path.config.looks[-1]}), applied "
            f"{path.applied_runs} since; {counted}")


def _detector(spec: AgentSpec) -> Safe:
    """The daemon's detector on the live revision: its statistic against its threshold, and what the
    threshold's false-trigger rate assumes (``trigger-state.json``, written by the daemon at each change)."""
    state = read_state(spec)
    if state is None:
        return el("p", "The daemon has not looked at this agent's runs yet (or runs the seeds' window rule).",
                  cls="muted", id="trigger-state")
    threshold = state.get("threshold")
    fields: dict[str, Any] = {
        "revision": el("code", str(state.get("revision"))),
        "CUSUM statistic": f"{state.get('statistic', 0):.3f}",
        "threshold": "none yet: the reference is incomplete and the detector does not fire"
                     if threshold is None else f"{threshold:.3f}",
        "reference": f"{state.get('reference_runs')} runs (at least {state.get('reference_needed')})",
    }
    if threshold is not None:
        fields["looking for"] = f"pass rate {state.get('p0')} falling to {state.get('p1')}"
        fields["runs watched"] = str(state.get("runs_watched"))
        fields["false triggers"] = (f"at most {state.get('false_trigger_per_week')} a week over "
                                    f"{state.get('week_runs')} runs, assuming {state.get('model')}")
    tone = "bad" if state.get("alarm_run") is not None else "ok" if threshold is not None else "warn"
    return join([el("p", str(state.get("describe", "")), cls=f"note {tone}", id="trigger-state"), dl(fields)])


def _cycles(spec: AgentSpec) -> Safe:
    """The trigger's log, newest first: each regression, the cycle it started, and how that ended."""
    records = read_records(spec)
    if not records:
        return el("p", "No regression has started a cycle yet.", cls="muted")
    rows = []
    for r in records:
        outcome = r.get("outcome") or ""
        tone = "bad" if outcome in ("failed", "error") else "ok" if outcome == "applied" else None
        rows.append([el("td", str(r.get("at", "")), cls="nowrap"), el("code", r.get("action")),
                     el("code", r.get("revision")), el("span", outcome, cls=f"badge {tone}") if tone else outcome,
                     short(str(r.get("reason", "")), 300), el("code", r.get("log") or "")])
    return table(["at", "action", "revision", "outcome", "reason", "cycle log"], rows, id="cycles")


def _audit(audit: AuditLog) -> Safe:
    verdict = audit.verdict
    note = el("p", el("strong", "chain verifies: " if verdict.ok else "chain BROKEN: "), verdict.reason,
              cls="note ok" if verdict.ok else "note bad", id="audit-verdict")
    if not audit.entries:
        return join([note, el("p", "No entries.", cls="muted")])
    shown = audit.entries[-SHOWN_ENTRIES:][::-1]
    rows = []
    for number_, entry in shown:
        bad = verdict.first_bad is not None and number_ >= verdict.first_bad
        if entry is None:
            cells = [el("td", number_, cls="num"), "", el("span", "not JSON", cls="badge bad"), ""]
        else:
            extra = {k: v for k, v in entry.items() if k not in ("seq", "at", "action", "prev")}
            text = "; ".join(f"{k}={short(json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v, 160)}"
                             for k, v in sorted(extra.items()))
            cells = [el("td", entry.get("seq"), cls="num"), el("td", str(entry.get("at", "")), cls="nowrap"),
                     el("code", entry.get("action")), text]
        rows.append(el("tr", *(c if isinstance(c, Safe) and c.startswith("<td") else el("td", c) for c in cells),
                       cls="broken" if bad else None))
    caption = (f"newest first; the last {SHOWN_ENTRIES} of {len(audit.entries)}"
               if len(audit.entries) > SHOWN_ENTRIES else "newest first")
    return join([note, el("p", caption, cls="muted"), table(["seq", "at", "action", "fields"], rows, id="audit")])
