"""The daemon's page over HTTP: the token rules, the CSP, escaping of span values, filters, the run's span
tree, an agent's monitor path and audit log, and the recovery state. A real daemon gets real spans from
the OTel SDK; the agent directory's audit log is written by improve's own writer and the run store by
recover's own store, so the page reads the files those parts really write."""

from __future__ import annotations

import hashlib
import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from agent_runs import emit_run
from daemon_support import get, post
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from lousho.analysis.clustered import clustered_interval
from lousho.analysis.live_monitor import Monitor
from lousho.analysis.stats import pooled_z
from lousho.improve import audit
from lousho.improve.applied_edit import AppliedEdit
from lousho.improve.state import Paths
from lousho.observe.client.export import instrument, record_score
from lousho.observe.client.process import DaemonProcess, start_daemon
from lousho.observe.client.store_client import connect
from lousho.observe.trigger.detector import CusumConfig, Detector, Run
from lousho.page.agent import edit_that_matters
from lousho.page.agentdir import read_audit
from lousho.page.recover import BadRecoverStore, parse_store_url
from lousho.recover import durable
from lousho.recover.store import open as open_run_store

TOKEN = "page-s3cret"
AUTH = {"authorization": f"Bearer {TOKEN}"}
SCRIPT = "<script>alert('span')</script>"
# Ends an attribute value and opens a tag, should it ever be written into an attribute unescaped.
ATTR_BREAKER = 'r1"><script>alert(2)</script>'
T0 = 1_790_000_000_000_000_000  # 2026-09-21, ns
APPLIED_NS = T0 + 200 * 1_000_000_000
BASE_RUNS, APPLIED_RUNS = 30, 24
# The applied revision fails 9 of its first 20 runs: a drop of 0.45 crosses the boundary at the first look.
APPLIED_FAILS = {0, 2, 4, 6, 8, 10, 12, 14, 16}


@dataclass
class Site:
    daemon: DaemonProcess
    agent_dir: Path
    run_store: Path

    def page(self, path: str, **headers: str):
        return get(self.daemon.url, path, **{**AUTH, **headers})

    def html(self, path: str) -> str:
        reply = self.page(path)
        assert reply.status == 200, (path, reply.status, reply.body[:500])
        return reply.body.decode()


def _send_runs(url: str) -> None:
    provider = instrument("ledger", url, token=TOKEN, batch=True)
    tracer = provider.get_tracer("tests.page")

    def run(run_id: str, agent: str, revision: str, start: int, passed: bool | None, *, output: str = "42",
            error: str | None = None, heal: dict[str, object] | None = None, extra: dict[str, str] | None = None):
        root = tracer.start_span(f"invoke_agent {agent}", start_time=start, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "lousho.run.id": run_id,
            "lousho.harness.revision": revision, "lousho.case.id": "add-2-2", "gen_ai.input.messages": "add 2 2",
            "gen_ai.output.messages": output, **(extra or {})})
        context = trace.set_span_in_context(root)
        chat = tracer.start_span("chat scripted", context=context, start_time=start + 1_000, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted", "lousho.run.id": run_id,
            "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 5})
        chat.end(end_time=start + 2_000_000)
        if heal is not None:
            tool = tracer.start_span("execute_tool add", context=context, start_time=start + 2_100_000, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add", "lousho.run.id": run_id})
            tool.add_event("heal.action", attributes=heal)
            tool.end(end_time=start + 2_500_000)
        if passed is not None:
            record_score(root, "check", 1.0 if passed else 0.0, "pass" if passed else "fail",
                         explanation=None if passed else "expected 4",
                         failed_check=None if passed else "sum-correct")
        if error is not None:
            root.set_attribute("error.type", "ToolError")
            root.set_status(Status(StatusCode.ERROR, error))
        root.end(end_time=start + 5_000_000)

    second = 1_000_000_000
    for i in range(BASE_RUNS):
        run(f"base-{i:02d}", "ledger", "rev-base", T0 + i * second, True)
    for i in range(APPLIED_RUNS):
        run(f"after-{i:02d}", "ledger", "rev-after", APPLIED_NS + (i + 1) * second, i not in APPLIED_FAILS)
    run("planted", "ledger", "rev-after", APPLIED_NS + 100 * second, False, output=SCRIPT,
        heal={"heal.kind": "deny", "heal.hook": "progress_guard", "heal.tool": "add",
              "heal.reason": "<img src=x onerror=alert(3)>", "heal.count": 2},
        extra={"custom.note": SCRIPT})
    run("errored", "ledger", "rev-after", APPLIED_NS + 101 * second, None, error=f"tool failed: {SCRIPT}")
    run("other-1", "other", ATTR_BREAKER, APPLIED_NS + 102 * second, True)
    run("other-2", "other", ATTR_BREAKER, APPLIED_NS + 103 * second, False)
    provider.force_flush()
    provider.shutdown()


def _agent_dir(root: Path) -> Path:
    directory = root / "agent"
    (directory / ".lousho").mkdir(parents=True)
    # A harness and a check module the daemon accepts at start (--agent is validated).
    (directory / "instructions.md").write_text("Add numbers with the add tool.\n")
    (directory / "check.py").write_text("def cases():\n    return []\n\n\ndef check(input_text, output):\n"
                                        "    return None\n")
    paths = Paths(directory)
    audit.append(paths, "cycle-start", cycle="c-1", mode="auto")
    applied_at = datetime.fromtimestamp(APPLIED_NS / 1e9, UTC)
    audit.append(paths, "apply", before="rev-base", after="rev-after", by="auto", files=["instructions.md"])
    audit.append(paths, "cycle-end", cycle="c-1", outcome="applied", reason="applied rev-after")
    _append_unfiltered(paths, {"action": "note", "at": applied_at.isoformat(), "reason": f"model said {SCRIPT}"})
    state = {"watched": {"before": "rev-base", "after": "rev-after", "applied_at": applied_at.isoformat(),
                         "status": "monitoring", "cited": [], "fixed": []}}
    (directory / ".lousho" / "state.json").write_text(json.dumps(state, sort_keys=True, indent=1))
    return directory


def _append_unfiltered(paths: Paths, entry: dict[str, object]) -> None:
    """A correctly chained line that skips the writer's plain-text filter, as a hand-edited (and re-hashed)
    log could hold: the page must escape what it shows from the log, not trust the writer."""
    lines = paths.audit.read_bytes().rstrip(b"\n").split(b"\n")
    line = json.dumps({**entry, "seq": len(lines) + 1, "prev": hashlib.sha256(lines[-1]).hexdigest()},
                      sort_keys=True, separators=(",", ":")).encode()
    paths.audit.write_bytes(paths.audit.read_bytes() + line + b"\n")
    paths.audit_head.write_text(json.dumps({"count": len(lines) + 1, "hash": hashlib.sha256(line).hexdigest()}))


def _run_store(root: Path) -> Path:
    path = root / "runs.db"
    store = open_run_store(f"sqlite:///{path}")
    try:
        durable.start(store, "finished-run", "ledger", "send", {}).finish("done")
        durable.start(store, "flaky-run", "ledger", "send", {}).fail(TimeoutError("model timed out"))
        durable.start(store, "stuck-run", "ledger", "send", {}).fail(RuntimeError(SCRIPT))
        store.update_run("stuck-run", status="quarantined")
        now = datetime.now(UTC)
        error = {"message": "HTTP 503", "code": "LOUSHO_PROVIDER_UNKNOWN", "category": "unknown", "retryable": True}
        for _ in range(3):
            store.record_outcome(provider_failure=True, now=now, threshold=3,
                                 first_probe_at=now + timedelta(seconds=30), error=error)
    finally:
        store.close()
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("page")
    agent_dir = _agent_dir(root)
    run_store = _run_store(root)
    # LOUSHO_IMPROVE=off: the registered agent's regression trigger must not start a cycle of its own.
    daemon = start_daemon(root / "observe.duckdb", "--token", TOKEN, "--agent",
                          f"ledger={agent_dir}:{agent_dir / 'check.py'}", "--recover-store",
                          f"sqlite:///{run_store}", env={"LOUSHO_IMPROVE": "off"})
    try:
        _send_runs(daemon.url)
        yield Site(daemon, agent_dir, run_store)
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


def _run_ids(body: str) -> list[str]:
    return re.findall(r'<a href="/runs/[^"]*" class="run-link"><code>([^<]*)</code>', body)


PAGES = ["/", "/?failed=1", "/runs/planted", "/agents", "/agents/ledger", "/agents/other", "/recovery", "/page.css"]


@pytest.mark.system
def test_the_page_needs_the_token_when_the_daemon_has_one_and_healthz_stays_open(site):
    for path in PAGES:
        assert get(site.daemon.url, path).status == 401, path
        assert get(site.daemon.url, path, authorization="Bearer wrong").status == 401, path
        assert site.page(path).status == 200, path
    refused = get(site.daemon.url, "/")
    assert refused.headers["www-authenticate"] == "Bearer"
    assert TOKEN not in refused.body.decode()
    assert get(site.daemon.url, "/healthz").status == 200


@pytest.mark.system
def test_a_token_in_the_query_once_sets_an_httponly_strict_cookie_and_leaves_the_address(site):
    assert get(site.daemon.url, "/?token=wrong").status == 401
    reply = get(site.daemon.url, f"/?agent=ledger&token={TOKEN}&failed=1")
    assert reply.status == 303
    assert reply.headers["location"] == "/?agent=ledger&failed=1"  # the token is gone from the address
    cookie = reply.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    pair = cookie.split(";", 1)[0]
    assert TOKEN not in pair  # an HMAC of the token, not the token
    assert get(site.daemon.url, "/?agent=ledger&failed=1", cookie=pair).status == 200
    assert get(site.daemon.url, "/runs/planted", cookie=pair).status == 200
    assert get(site.daemon.url, "/", cookie=pair.replace("=", "=0", 1)).status == 401
    # The cookie opens the page only: the API still wants the bearer header.
    assert post(site.daemon.url, "/v1/sql", b'{"query": "SELECT 1"}', "application/json", cookie=pair).status == 401
    assert get(site.daemon.url, "/metrics", cookie=pair).status == 401


@pytest.mark.system
def test_the_token_redirect_stays_on_the_daemon_and_keeps_the_path(site):
    reply = get(site.daemon.url, f"/runs/a%2Fb%3Fc?token={TOKEN}")
    assert (reply.status, reply.headers["location"]) == (303, "/runs/a%2Fb%3Fc")
    # Not a page path: the API answers, and nothing redirects to another host.
    reply = get(site.daemon.url, f"//evil.example/x?token={TOKEN}")
    assert reply.status == 401 and "location" not in reply.headers


@pytest.mark.system
def test_every_page_sends_a_strict_csp_and_loads_nothing_from_elsewhere(site):
    for path in [*PAGES, "/runs/missing"]:
        for reply in (site.page(path), get(site.daemon.url, path)):
            csp = reply.headers["content-security-policy"]
            assert "default-src 'self'" in csp and "script-src 'none'" in csp and "frame-ancestors 'none'" in csp
            assert reply.headers["x-content-type-options"] == "nosniff"
            assert reply.headers["referrer-policy"] == "no-referrer"
            assert reply.headers["cache-control"] == "no-store"
        body = site.page(path).body.decode()
        assert "<script" not in body.lower()
        assert not re.search(r'(src|href|action)="(https?:)?//', body), path
        assert "@import" not in body and "url(" not in body


@pytest.mark.system
def test_span_values_are_escaped_everywhere_they_appear(site):
    pages = {path: site.html(path) for path in
             ("/runs/planted", "/runs/errored", "/?agent=ledger", "/?agent=other", "/agents/ledger",
              "/agents/other", "/recovery")}
    for path, body in pages.items():
        assert "<script>alert" not in body, path
        assert "<img src=x" not in body, path
    assert "&lt;script&gt;alert(&#x27;span&#x27;)&lt;/script&gt;" in pages["/runs/planted"]  # output and attribute
    assert "&lt;img src=x onerror=alert(3)&gt;" in pages["/runs/planted"]  # the heal.action reason
    assert "tool failed: &lt;script&gt;" in pages["/runs/errored"]  # the status message
    assert "r1&quot;&gt;&lt;script&gt;" in pages["/?agent=other"]  # a revision inside attribute values
    assert "model said &lt;script&gt;" in pages["/agents/ledger"]  # the audit log
    assert "RuntimeError: &lt;script&gt;" in pages["/recovery"]  # the run store's last error


@pytest.mark.system
def test_runs_filter_by_agent_revision_and_failed(site):
    everything = _run_ids(site.html("/?limit=1000"))
    assert len(everything) == BASE_RUNS + APPLIED_RUNS + 4
    assert _run_ids(site.html("/?limit=5")) == ["other-2", "other-1", "errored", "planted", "after-23"]
    assert set(_run_ids(site.html("/?agent=other"))) == {"other-1", "other-2"}
    by_revision = _run_ids(site.html("/?agent=ledger&revision=rev-base&limit=1000"))
    assert sorted(by_revision) == [f"base-{i:02d}" for i in range(BASE_RUNS)]
    failed = _run_ids(site.html("/?agent=ledger&failed=1&limit=1000"))
    assert sorted(failed) == sorted(["planted", "errored", *(f"after-{i:02d}" for i in APPLIED_FAILS)])
    query = urllib.parse.urlencode({"agent": "other", "revision": ATTR_BREAKER, "failed": "1"})
    assert _run_ids(site.html(f"/?{query}")) == ["other-2"]
    assert "No runs match." in site.html("/?agent=nobody")
    options = site.html("/")
    assert '<option value="ledger">ledger</option>' in options and '<option value="rev-base">' in options


@pytest.mark.system
def test_a_run_shows_its_span_tree_heal_actions_and_scores(site):
    body = site.html("/runs/planted")
    tree = body[body.index('id="span-tree"'):body.index("<h2>Scores")]
    assert tree.index("invoke_agent ledger") < tree.index("chat scripted") < tree.index("execute_tool add")
    assert 'class="d1"><span class="span-name">chat scripted' in tree  # a child sits one level in
    assert "heal.action" in tree and "kind=deny hook=progress_guard tool=add" in tree and "count=2" in tree
    assert "check = 0.0 fail (failed check: sum-correct)" in tree
    scores = body[body.index('id="scores"'):]
    assert "sum-correct" in scores and "expected 4" in scores and 'class="badge bad">fail' in scores
    # The run's own page (site.html checked the 200), not the not-found page: its marker, never a bare "404",
    # which a random span id or a time like 01:10:04.404 on this page may hold.
    missing = site.page("/runs/nope")
    assert missing.status == 404 and "<h1>No such run</h1>" in missing.body.decode()
    assert "<h1>No such run</h1>" not in body


@pytest.mark.system
def test_an_agent_page_shows_pass_rates_the_monitor_path_and_a_verified_audit_log(site):
    body = site.html("/agents/ledger")
    rates = body[body.index('id="pass-rates"'):]
    assert re.search(r"rev-base</code></a></td><td class=\"num\">30</td><td class=\"num\">30</td>", rates)
    assert re.search(r"rev-after</code></a></td><td class=\"num\">25</td><td class=\"num\">15</td>", rates)
    # pass_rates' interval, clustered by case here (every run is case add-2-2, none has a session): one cluster.
    after = clustered_interval([1] * 15 + [0] * 10, ["add-2-2"] * 25)
    assert f"{after.low:.1%} – {after.high:.1%}</td><td class=\"num\">1</td>" in rates
    assert 'id="pass-rate-interval"' in body and "cluster-robust" in body
    assert "<svg" in body and "pass rate by harness revision, by run" in body
    assert "the edit being watched (monitoring)" in body  # state.json's watched edit, under watch
    # No base run since the apply (no holdback): the watch falls back to stratified, by case, as the watcher's
    # monitor does. Base 20/20 against applied 11/20 at the first look: drop 0.45, rolled back; the page shows
    # the live monitor's z (the CMH z on one case, not the pooled z).
    decision = Monitor(connect(site.daemon.url, token=TOKEN), "ledger", "rev-base", "rev-after",
                       datetime.fromtimestamp(APPLIED_NS / 1e9, UTC)).check()
    assert (decision.action, decision.design, decision.look) == ("rollback", "stratified", 1)
    assert "roll back at the look at 20 runs per side" in body and "[stratified by case" in body
    looks = body[body.index('id="monitor-looks"'):]
    assert f"{decision.z:.2f}" in looks and "20/20" in looks and "11/20" in looks
    assert f"{decision.z:.2f}" != f"{pooled_z(20, 20, 11, 20):.2f}"
    assert 'id="audit-verdict"' in body and "chain verifies: </strong>4 lines, chain and head match" in body
    # The trigger's CUSUM on the live revision: its 26 runs (25 scored, one without a verdict: a failure to it)
    # are a 1,000-run reference's start, so no threshold yet. The daemon looks every 5 s.
    deadline = time.monotonic() + 30
    while "reference incomplete: 26 " not in body and time.monotonic() < deadline:
        time.sleep(0.2)
        body = site.html("/agents/ledger")
    trigger = body[body.index('id="trigger-state"'):]
    assert "reference incomplete: 26 of at least 1000 runs (the detector does not fire before)" in trigger
    assert "none yet: the reference is incomplete" in trigger
    assert "not registered" in site.html("/agents") and "Register the agent" in site.html("/agents/other")


@pytest.mark.system
def test_an_agent_page_shows_the_cusum_statistic_and_threshold_once_the_reference_is_complete(tmp_path):
    """The numbers the detector reaches on the agent's runs, as the page shows them; a 20-run reference (no
    hours) keeps the test short. The daemon looks five times a second and starts no cycle (LOUSHO_IMPROVE=off)."""
    directory = tmp_path / "coder"
    directory.mkdir()
    (directory / "instructions.md").write_text("Answer tersely.\n")
    (directory / "check.py").write_text("def check(case, output):\n    return None\n")
    daemon = start_daemon(tmp_path / "observe.duckdb", "--token", TOKEN, "--agent",
                          f"coder={directory}:{directory / 'check.py'}", "--trigger-interval", "0.2",
                          "--trigger-settle", "0", "--trigger-reference-runs", "20", "--trigger-reference-hours", "0",
                          "--trigger-runs-per-day", "300", env={"LOUSHO_IMPROVE": "off"})
    provider = instrument("coder", daemon.url, token=TOKEN)
    outcomes = [i % 10 != 8 for i in range(30)]  # the watched run 28 fails: the statistic ends above 0
    state_file = directory / ".lousho" / "trigger-state.json"
    try:
        for i, passed in enumerate(outcomes):
            emit_run(provider, f"run-{i:02d}", outcome="pass" if passed else "fail")
        assert provider.force_flush()
        deadline = time.monotonic() + 30
        while not (state_file.exists() and json.loads(state_file.read_text())["runs_watched"] == 10):
            assert time.monotonic() < deadline, "the trigger did not watch the 10 runs after the reference"
            time.sleep(0.05)
        body = get(daemon.url, "/agents/coder", **AUTH).body.decode()
    finally:
        provider.shutdown()
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])
    expected = Detector("rev-1", CusumConfig(reference_runs=20, reference_hours=0.0, runs_per_day=300))
    expected.feed([Run(f"run-{i:02d}", i, passed) for i, passed in enumerate(outcomes)])
    reading = expected.reading()
    assert reading.threshold is not None and reading.statistic > 0 and not reading.regressed
    trigger = body[body.index('id="trigger-state"'):]
    assert f"<dt>CUSUM statistic</dt><dd>{reading.statistic:.3f}</dd>" in trigger
    assert f"<dt>threshold</dt><dd>{reading.threshold:.3f}</dd>" in trigger
    assert f"CUSUM {reading.statistic:.2f} (threshold {reading.threshold:.2f}) after 10 runs watched" in trigger
    assert "<dt>runs watched</dt><dd>10</dd>" in trigger and "at most 0.05 a week over 2100 runs" in trigger
    assert "none yet" not in trigger and "reference incomplete" not in trigger


@pytest.mark.system
def test_an_edited_audit_line_shows_as_a_broken_chain(site):
    log = site.agent_dir / ".lousho" / "audit.jsonl"
    original = log.read_bytes()
    try:
        log.write_bytes(original.replace(b'"mode":"auto"', b'"mode":"manual"'))
        body = site.html("/agents/ledger")
        # improve's verifier names the line that was edited, and the link that broke.
        assert "chain BROKEN: </strong>line 1 was edited" in body and "line 2 does not chain to line 1" in body
    finally:
        log.write_bytes(original)


@pytest.mark.system
@pytest.mark.parametrize("watched", ['"x"', "[1]", "7"])
def test_a_corrupt_state_file_is_a_note_on_the_page_not_a_500(site, watched):
    state = site.agent_dir / ".lousho" / "state.json"
    original = state.read_bytes()
    try:
        state.write_text('{"watched": ' + watched + "}")
        body = site.html("/agents/ledger")
        assert "watched is not an object" in body
        assert "chain verifies" in body or "audit" in body  # the audit log still shows
    finally:
        state.write_bytes(original)


@pytest.mark.system
def test_the_recovery_page_shows_pending_and_quarantined_runs_and_the_outage(site):
    body = site.html("/recovery")
    assert "provider outage: recovery paused since" in body and "LOUSHO_PROVIDER_UNKNOWN" in body
    quarantined = body[body.index('id="quarantined"'):body.index('id="pending"')]
    assert "stuck-run" in quarantined and "flaky-run" not in quarantined
    pending = body[body.index('id="pending"'):]
    assert "flaky-run" in pending and "TimeoutError: model timed out" in pending and "finished-run" not in pending
    assert re.search(r"<td>finished</td><td class=\"num\">1</td>", body)


def test_recover_store_takes_sqlite_urls_only():
    assert parse_store_url("sqlite:///.lousho/runs.db") == Path(".lousho/runs.db")
    assert parse_store_url("sqlite:////var/runs.db") == Path("/var/runs.db")
    for url in ("postgresql://u:pw@host/db", "runs.db", "sqlite://host/runs.db"):
        with pytest.raises(BadRecoverStore) as info:
            parse_store_url(url)
        assert "pw" not in info.value.message


@pytest.mark.system
def test_the_daemon_refuses_a_postgres_recover_store_as_a_usage_error(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "lousho.observe", "--db", str(tmp_path / "o.duckdb"),
                             "--recover-store", "postgresql://u:secret@db/x"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "LOUSHO_OBSERVE_BAD_RECOVER_STORE" in result.stdout + result.stderr
    assert "secret" not in result.stdout + result.stderr
    assert not (tmp_path / "o.duckdb").exists()


def test_the_audit_verdict_agrees_with_improves_verify(tmp_path):
    tampers = {
        "intact": lambda lines: lines,
        "edited": lambda lines: [lines[0], lines[1].replace(b'"x":1', b'"x":2'), *lines[2:]],
        "removed": lambda lines: [lines[0], *lines[2:]],
        "moved": lambda lines: [lines[1], lines[0], *lines[2:]],
        "truncated": lambda lines: lines[:-1],
        "appended": lambda lines: [*lines, lines[-1]],
        "not json": lambda lines: [lines[0], b"{oops", *lines[2:]],
        "last edited": lambda lines: [*lines[:-1], lines[-1].replace(b'"x":3', b'"x":4')],
    }
    for name, tamper in tampers.items():
        directory = tmp_path / name.replace(" ", "-")
        paths = Paths(directory)
        for x in (1, 1, 3):
            audit.append(paths, "step", x=x)
        lines = paths.audit.read_bytes().rstrip(b"\n").split(b"\n")
        paths.audit.write_bytes(b"\n".join(tamper(lines)) + b"\n")
        ours, theirs = read_audit(paths.root).verdict, audit.verify(paths)
        assert ours.ok == theirs.ok, (name, ours, theirs)
        assert (name == "intact") == ours.ok
    (tmp_path / "intact" / ".lousho" / "audit.head.json").unlink()
    assert not read_audit(tmp_path / "intact" / ".lousho").verdict.ok


def test_the_monitor_shows_the_watched_edit_else_the_last_kept_one_not_a_rolled_back_one():
    at = datetime(2026, 1, 1, tzinfo=UTC)
    fix = AppliedEdit("rev-1", "rev-2", at, None, None, "audit line 3")
    planted = AppliedEdit("rev-2", "rev-3", at, None, None, "audit line 9")
    rolled_back = AppliedEdit("rev-2", "rev-3", at, "rolled-back", "corpus guard", "state.json")
    edits = [(3, fix), (9, planted)]
    assert edit_that_matters(rolled_back, edits, {"rev-2"}) == (fix, "the last kept edit")
    watching = AppliedEdit("rev-2", "rev-3", at, "monitoring", None, "state.json")
    assert edit_that_matters(watching, edits, {"rev-2"})[0] is watching
    assert edit_that_matters(None, edits, set()) == (planted, "the last applied edit")
