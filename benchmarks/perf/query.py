"""Reader queries over a large store: ``runs`` (kept tables merged with the unfolded tail) and what
``lousho runs``, the page, the monitor and ``cases_from_failures`` ask of it.

A store of ``--runs`` runs (default 1,000,000, about 10,000,000 spans) is generated directly in
DuckDB, into the real ``spans`` and ``scores`` tables that ``SpanStore`` creates, then the kept
tables are built from them by the store's own SQL (``runs_table.REBUILD``, then a fold), so the
schema and the runs are the daemon's. Every query is timed twice: with nothing unfolded, and with a
tail of ``--tail`` spans (new runs' spans committed after the last fold, as the daemon has between
two folds), which is folded afterwards (the cached store grows by those runs).

Each run is one trace: an ``invoke_agent`` root carrying the run attributes, 1 to 8 steps of
``chat`` + ``execute_tool``, and one pass/fail score; about 20% of runs fail (a quarter of those in
an error status). The file is cached under ``.lousho/bench/``, keyed by size, generator and the
tables' SQL; a change to the derived tables' SQL rebuilds them on the cached file instead of
regenerating the spans. ``lousho runs --failed --limit 50`` is also timed as a process, start-up
included, against a daemon serving the store.

Each query is timed the way readers run it (``lousho.observe.connect(path)``: a read-only open,
Arrow then Polars), median of ``--repeats`` after one warm-up, as a ratio to its limit (1 s). When
one is over, the script shows where the time goes (EXPLAIN ANALYZE's profile). All of it on the
read-only connection: lousho/ itself is never touched.

The hook for more timings is ``TIMINGS`` (name, description, callable taking the client and a
context, limit). ``analysis.cases_from_failures`` is timed too when that module is importable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as common
import duckdb

from lousho.observe import connect
from lousho.observe.client.cli import RUN_COLUMNS, newest_runs
from lousho.observe.client.process import start_daemon
from lousho.observe.client.store_client import StoreClient
from lousho.observe.decode.otlp_decode import resource_key
from lousho.observe.runs import runs_table
from lousho.observe.runs.runs_view import newest_runs_query
from lousho.observe.store import schema
from lousho.observe.store.span_store import SpanStore, open_read_only

GENERATOR_VERSION = 3
LIMIT_S = 1.0
CHUNK_RUNS = 100_000
RUN_GAP_NS = 2_600_000_000  # a run every 2.6 s: 1M runs cover about a month
CASES = 200
RESOURCE = '{"service.name":"bench-agent","telemetry.sdk.language":"python"}'
RESOURCE_KEY = resource_key(RESOURCE)


# --- the store ---


def _statements() -> list[str]:
    return [s for _, statements in schema.MIGRATIONS for s in statements]


def _is_view(statement: str) -> bool:
    return " VIEW " in statement.upper()


def _is_data(statement: str) -> bool:
    """A statement shaping the spans and scores tables (the generated data), not what derives from them."""
    return statement.startswith(("CREATE TABLE spans", "CREATE TABLE scores", "ALTER TABLE spans",
                                 "ALTER TABLE scores", "\nCREATE TABLE spans", "\nCREATE TABLE scores",
                                 "CREATE TABLE span_rows", "ALTER TABLE span_rows", "CREATE TABLE resources"))


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def cache_path(runs: int) -> Path:
    """The cached store for ``runs``, keyed by size, generator and the tables' SQL. Views hold no
    data: a changed view is re-applied to the cached file (``refresh_views``), not regenerated."""
    tables = [s for s in _statements() if _is_data(s)]
    digest = _digest([str(GENERATOR_VERSION), *tables])
    return common.BENCH_DIR / f"query-{runs}-runs-{digest}.duckdb"


def refresh_derived(path: Path) -> bool:
    """Make the cached file's kept runs and sessions the current code's: rebuilt from its spans when
    the SQL that derives them changed (a sidecar holds the digest of what was applied)."""
    marker = path.with_name(path.name + ".derived")
    wanted = _digest([*runs_table.MIGRATION, *runs_table.REBUILD])
    if marker.exists() and marker.read_text().strip() == wanted:
        return False
    con = duckdb.connect(str(path))
    try:
        # A new migration comes with a change of this SQL: applied here, a daemon opening the file later finds
        # nothing to do, where it would otherwise fold the whole store again before it serves.
        schema.migrate(con)
        con.execute("BEGIN")
        for statement in runs_table.REBUILD:
            con.execute(statement)
        con.execute("COMMIT")
        runs_table.fold(con)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    marker.write_text(wanted + "\n")
    return True


def _sql_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


# One chunk of runs [lo, hi): every value derives from hash(run number, salt), so a chunk is the
# same whoever generates it. Ids are lowercase hex; span_key is (span_id << 64) | low 64 bits of the
# trace id, as the daemon computes it. Children: odd k are chat, even k execute_tool, step (k-1)//2.
_RUNS_CTE = f"""
WITH r AS (
    SELECT r,
        hash(r, 'trace-hi') AS thi,
        hash(r, 'trace-lo') AS tlo,
        hash(r, 'root') AS root_sid,
        (1 + hash(r, 'steps') % 8)::INTEGER AS steps,
        (hash(r, 'outcome') % 100)::INTEGER AS outcome,
        {_sql_list(common.AGENTS)}[1 + (r % {len(common.AGENTS)})::INTEGER] AS agent,
        {_sql_list(common.REVISIONS)}[1 + (hash(r, 'rev') % {len(common.REVISIONS)})::INTEGER]
            AS revision,
        'case-' || lpad((hash(r, 'case') % {CASES})::VARCHAR, 3, '0') AS case_id,
        {common.BASE_NS}::BIGINT + r * {RUN_GAP_NS}::BIGINT AS root_start
    FROM range(?, ?) t(r)
), runs AS (
    SELECT *,
        format('{{:016x}}{{:016x}}', thi, tlo) AS trace_id,
        format('{{:016x}}', root_sid) AS root_id,
        'run-' || format('{{:016x}}', thi) AS run_id,
        outcome < 5 AS errored,
        outcome < 20 AS failed,
        root_start + steps * 1_500_000_000::BIGINT + 2_000_000 AS root_end
    FROM r
)
"""

_INSERT_SPANS = _RUNS_CTE + """
, s AS (
    SELECT *, unnest(range(2 * steps + 1)) AS k FROM runs
), c AS (
    SELECT *,
        CASE WHEN k = 0 THEN root_sid ELSE hash(r, k) END AS sid,
        (k - 1) // 2 AS step,
        k % 2 = 1 AS is_chat,
        ['read_file', 'run_tests', 'edit_file', 'search'][1 + ((r + (k - 1) // 2) % 4)::INTEGER] AS tool,
        (200 + hash(r, k, 'in') % 1800)::BIGINT AS tin,
        (20 + hash(r, k, 'out') % 380)::BIGINT AS tout
    FROM s
), t AS (
    SELECT *,
        CASE WHEN k = 0 THEN root_start
             ELSE root_start + 1_000_000 + step * 1_500_000_000::BIGINT
                  + CASE WHEN is_chat THEN 0 ELSE 1_200_000_000 END END AS start_ns,
        CASE WHEN k = 0 THEN root_end
             ELSE root_start + 1_000_000 + step * 1_500_000_000::BIGINT
                  + CASE WHEN is_chat THEN 1_100_000_000 ELSE 1_450_000_000 END END AS end_ns
    FROM c
)
INSERT INTO span_rows
SELECT
    (sid::UHUGEINT << 64) | tlo::UHUGEINT AS span_key,
    trace_id,
    format('{:016x}', sid) AS span_id,
    CASE WHEN k = 0 THEN NULL ELSE root_id END AS parent_span_id,
    CASE WHEN k = 0 THEN 'invoke_agent ' || agent WHEN is_chat THEN 'chat gpt-test'
         ELSE 'execute_tool ' || tool END AS name,
    CASE WHEN is_chat THEN 'CLIENT' ELSE 'INTERNAL' END AS kind,
    start_ns, end_ns, end_ns - start_ns AS duration_ns,
    CASE WHEN k = 0 AND errored THEN 'ERROR' ELSE 'UNSET' END AS status_code,
    CASE WHEN k = 0 AND errored THEN 'model call timed out' END AS status_message,
    'bench-agent' AS service_name,
    'lousho.workload' AS scope_name,
    CASE WHEN k = 0 THEN 'invoke_agent' WHEN is_chat THEN 'chat' ELSE 'execute_tool' END AS operation,
    CASE WHEN k = 0 THEN agent END AS agent_name,
    CASE WHEN k = 0 OR is_chat THEN 'openai' END AS provider,
    CASE WHEN is_chat THEN 'gpt-test' END AS request_model,
    CASE WHEN is_chat THEN 'gpt-test-2026' END AS response_model,
    CASE WHEN k > 0 AND NOT is_chat THEN tool END AS tool_name,
    CASE WHEN k = 0 THEN 'conv-' || (r // 3)::VARCHAR END AS conversation_id,
    CASE WHEN is_chat THEN tin END AS input_tokens,
    CASE WHEN is_chat THEN tout END AS output_tokens,
    CASE WHEN is_chat THEN tin * 2.5e-6 + tout * 1e-5 END AS cost_usd,
    CASE WHEN k = 0 AND errored THEN 'timeout' END AS error_type,
    CASE WHEN k = 0 THEN run_id END AS run_id,
    CASE WHEN k = 0 THEN 'send' END AS run_kind,
    NULL AS healed_from,
    CASE WHEN k = 0 THEN revision END AS harness_revision,
    CASE WHEN k = 0 THEN case_id END AS case_id,
    CASE WHEN k = 0 THEN false END AS probe,
    NULL AS traffic_arm,
    CASE WHEN k = 0 THEN '[{"role":"user","content":"fix ' || case_id || '"}]' END AS input,
    CASE WHEN k = 0 AND NOT errored THEN '[{"role":"assistant","content":"done ' || case_id || '"}]'
         END AS output,
    CASE
        WHEN k = 0 THEN '{"gen_ai.operation.name":"invoke_agent","gen_ai.agent.name":"' || agent
            || '","gen_ai.provider.name":"openai","gen_ai.conversation.id":"conv-' || (r // 3)::VARCHAR
            || '","lousho.run.id":"' || run_id || '","lousho.run.kind":"send",'
            || '"lousho.harness.revision":"' || revision || '","lousho.case.id":"' || case_id || '"}'
        WHEN is_chat THEN '{"gen_ai.operation.name":"chat","gen_ai.provider.name":"openai",'
            || '"gen_ai.request.model":"gpt-test","gen_ai.response.model":"gpt-test-2026",'
            || '"gen_ai.usage.input_tokens":' || tin::VARCHAR || ',"gen_ai.usage.output_tokens":'
            || tout::VARCHAR || ',"gen_ai.response.finish_reasons":["tool_calls"]}'
        ELSE '{"gen_ai.operation.name":"execute_tool","gen_ai.tool.name":"' || tool
            || '","gen_ai.tool.call.id":"call-' || r::VARCHAR || '-' || step::VARCHAR || '"}'
    END AS attributes,
    CASE WHEN k = 0 THEN '[{"name":"gen_ai.evaluation.result","time_ns":' || root_end::VARCHAR
        || ',"attributes":{"gen_ai.evaluation.name":"tests","gen_ai.evaluation.score.value":'
        || CASE WHEN failed THEN '0.0,"gen_ai.evaluation.score.label":"fail"'
                ELSE '1.0,"gen_ai.evaluation.score.label":"pass"' END || '}}]' END AS events,
    NULL AS links,
    end_ns + 5_000_000 AS received_ns,
    -- Schema migration 2 (conventions.py): these spans carry lousho.run.id, so no message text.
    NULL AS call_id,
    NULL AS cache_read_tokens,
    NULL AS cache_creation_tokens,
    NULL AS reasoning_tokens,
    CASE WHEN is_chat THEN 'reported' END AS cost_source,
    NULL AS skill_name,
    NULL AS input_text,
    NULL AS output_text,
    ?::BIGINT AS commit_seq,
    {RESOURCE_KEY}::BIGINT AS resource_key,  -- RESOURCE, kept once in resources (schema migration 5)
    -- Schema migration 6: lousho.harness.revision is declared, so no fingerprint and no derived source.
    NULL AS fingerprint,
    NULL AS revision_source
FROM t
""".replace("{RESOURCE_KEY}", str(RESOURCE_KEY))

_INSERT_SCORES = _RUNS_CTE + """
INSERT INTO scores
SELECT
    (root_sid::UHUGEINT << 64) | tlo::UHUGEINT AS span_key,
    0 AS seq,
    trace_id,
    root_id AS span_id,
    run_id,
    'tests' AS name,
    CASE WHEN failed THEN 0.0 ELSE 1.0 END AS score_value,
    CASE WHEN failed THEN 'fail' ELSE 'pass' END AS score_label,
    CASE WHEN failed THEN 'hidden test failed' END AS explanation,
    CASE WHEN failed THEN 'test_rounding' END AS failed_check,
    NOT failed AS passed,
    NULL AS error_type,
    root_end AS time_ns,
    CASE WHEN failed THEN '{"gen_ai.evaluation.name":"tests","gen_ai.evaluation.score.value":0.0,'
        || '"gen_ai.evaluation.score.label":"fail","lousho.check.failed":"test_rounding"}'
        ELSE '{"gen_ai.evaluation.name":"tests","gen_ai.evaluation.score.value":1.0,'
        || '"gen_ai.evaluation.score.label":"pass"}' END AS attributes,
    ?::BIGINT AS commit_seq
FROM runs
"""


def ensure_store(runs: int, quiet: bool, rebuild: bool = False) -> tuple[Path, float | None]:
    """The cached store for ``runs``, generated when missing; returns it and the generation time."""
    path = cache_path(runs)
    if path.exists() and not rebuild:
        started = time.perf_counter()
        if refresh_derived(path):
            common.say(quiet, f"  the runs table's SQL changed in the code: rebuilt it on the cached store "
                       f"({time.perf_counter() - started:.0f} s)")
        return path, None
    common.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    for stale in (partial, partial.with_name(partial.name + ".wal")):
        stale.unlink(missing_ok=True)
    started = time.perf_counter()
    store = SpanStore(partial)  # the real schema: tables, keys and the kept runs
    store.close()
    con = duckdb.connect(str(partial))
    try:
        con.execute("INSERT INTO resources VALUES (?, ?)", [RESOURCE_KEY, RESOURCE])
        for lo in range(0, runs, CHUNK_RUNS):
            hi = min(lo + CHUNK_RUNS, runs)
            con.execute("BEGIN")
            con.execute(_INSERT_SPANS, [lo, hi, 0])
            con.execute(_INSERT_SCORES, [lo, hi, 0])
            con.execute("COMMIT")
            common.say(quiet, f"  generated runs {hi:,}/{runs:,} "
                       f"({time.perf_counter() - started:.0f} s)")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    os.replace(partial, path)
    partial.with_name(partial.name + ".wal").unlink(missing_ok=True)
    path.with_name(path.name + ".derived").unlink(missing_ok=True)
    refresh_derived(path)
    return path, time.perf_counter() - started


def fold_tail(path: Path) -> None:
    """Fold what is unfolded (a tail this script added, or one an interrupted run left): the store is all
    kept again, and the spans' statistics end at the watermark, as after the daemon's fold (deleting the
    tail instead would leave the statistics above it, and every query paying for a tail that is not
    there)."""
    con = duckdb.connect(str(path))
    try:
        runs_table.fold(con)
        con.execute("CHECKPOINT")
    finally:
        con.close()


def add_tail(path: Path, runs: int, spans: int) -> int:
    """Commit new runs after the last fold until ``spans`` spans are unfolded; returns how many."""
    con = duckdb.connect(str(path))
    try:
        seq = con.execute("SELECT watermark + 1 FROM runs_fold").fetchall()[0][0]
        con.execute("BEGIN")
        # about 10 spans a run: ask for a few more runs than needed, then cut at ``spans``
        con.execute(_INSERT_SPANS, [runs, runs + spans // 8, seq])
        con.execute(_INSERT_SCORES, [runs, runs + spans // 8, seq])
        con.execute("DELETE FROM span_rows WHERE commit_seq = ? AND trace_id NOT IN (SELECT DISTINCT trace_id FROM "
                    "spans WHERE commit_seq = ? ORDER BY trace_id LIMIT ?)", [seq, seq, spans // 10])
        con.execute("DELETE FROM scores WHERE commit_seq = ? AND trace_id NOT IN (SELECT trace_id FROM spans "
                    "WHERE commit_seq = ?)", [seq, seq])
        con.execute("COMMIT")
        count = con.execute("SELECT count(*) FROM spans WHERE commit_seq > (SELECT watermark FROM runs_fold)"
                            ).fetchall()[0][0]
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return int(count)


def describe_store(path: Path) -> dict[str, Any]:
    con = open_read_only(path)
    try:
        spans, roots = con.execute(
            "SELECT count(*), count(run_id) FROM spans").fetchall()[0]
        scores, failed = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE NOT passed) FROM scores").fetchall()[0]
        errored = con.execute(
            "SELECT count(*) FROM spans WHERE run_id IS NOT NULL AND status_code = 'ERROR'").fetchall()[0][0]
        some_run, some_session = con.execute(
            "SELECT run_id, conversation_id FROM spans WHERE run_id IS NOT NULL AND conversation_id IS NOT NULL "
            "ORDER BY span_key LIMIT 1").fetchall()[0]
    finally:
        con.close()
    return {
        "spans": spans, "runs": roots, "scores": scores, "failed_scores": failed,
        "errored_runs": errored, "file_mib": path.stat().st_size / 2**20, "sample_run_id": some_run,
        "sample_session_id": some_session,
    }


# --- what is timed ---


@dataclass(frozen=True)
class Timing:
    """One timed reader operation: ``run(client, ctx)`` does it and returns rows fetched."""

    name: str
    description: str
    run: Callable[[StoreClient, dict[str, Any]], int]
    limit_s: float = LIMIT_S


def _sql(query: str, params: Callable[[dict[str, Any]], list[Any]] | None = None) -> Callable[..., int]:
    def run(client: StoreClient, ctx: dict[str, Any]) -> int:
        return client.sql(query, params(ctx) if params else None).height
    return run


FAILED_LIST = (f"SELECT {RUN_COLUMNS} FROM runs WHERE (status = 'error' OR passed = false) "
               "ORDER BY started_ns DESC LIMIT ?")
ONE_RUN = f"SELECT {RUN_COLUMNS}, input, output FROM runs WHERE run_id = ?"


def _cli_failed_50(client: StoreClient, ctx: dict[str, Any]) -> int:
    """`lousho runs --failed --limit 50` as the CLI asks it (cli.newest_runs)."""
    return newest_runs(client, agent=None, failed=True, limit=50).height


def _runs_show(client: StoreClient, ctx: dict[str, Any]) -> int:
    """All three queries of ``lousho runs show RUN_ID`` (cli.runs_show)."""
    run_id = ctx["run_id"]
    traces = "SELECT DISTINCT trace_id FROM spans WHERE run_id = ?"
    rows = client.sql(ONE_RUN, [run_id]).height
    rows += client.sql(
        "SELECT trace_id, span_id, parent_span_id, name, operation, status_code, "
        "status_message, start_ns, duration_ns, input_tokens, output_tokens, tool_name, "
        f"events FROM spans WHERE trace_id IN ({traces}) ORDER BY start_ns", [run_id]).height
    rows += client.sql(
        "SELECT trace_id, span_id, name, score_value, score_label, passed, failed_check, "
        f"explanation FROM scores WHERE trace_id IN ({traces}) ORDER BY time_ns", [run_id]).height
    return rows


# The hook: append a Timing here and it is timed, reported and compared with its limit like the
# others (``timings()`` adds cases_from_failures when it can be imported).
def _page_runs(client: StoreClient, ctx: dict[str, Any]) -> int:
    """The page's runs list of one agent (page.data.newest_runs: newest 50)."""
    return client.sql(*newest_runs_query(RUN_COLUMNS, agent=common.AGENTS[0], limit=50)).height


def _pass_rate(client: StoreClient, ctx: dict[str, Any]) -> int:
    """An agent's pass rate per revision: analysis.runs, then analysis.pass_rates."""
    from lousho.analysis.frames import PASS_RATE_COLUMNS, pass_rates, runs

    return pass_rates(runs(client, common.AGENTS[0], columns=PASS_RATE_COLUMNS)).height


def _page_sessions(client: StoreClient, ctx: dict[str, Any]) -> int:
    """The page's sessions list (page.sessions.newest_sessions: newest 50)."""
    from lousho.page.sessions import newest_sessions_query

    return client.sql(*newest_sessions_query(None, 50)).height


def _cli_sessions(client: StoreClient, ctx: dict[str, Any]) -> int:
    """``lousho sessions``'s query (sessions_cli: newest 50, every run id of each)."""
    from lousho.observe.client.sessions_cli import newest_sessions_query

    return client.sql(*newest_sessions_query(None, 50)).height


def _monitor(client: StoreClient, ctx: dict[str, Any]) -> int:
    """The regression trigger's poll of one agent (trigger/live_runs.LIVE_RUNS: its live revision's newest runs)."""
    from lousho.observe.trigger.live_runs import LIVE_RUNS

    return client.sql(LIVE_RUNS, [common.AGENTS[0], 40]).height


TIMINGS: list[Timing] = [
    Timing("a_runs_aggregate", "the runs table, fully aggregated",
           _sql("SELECT count(*), avg(passed::INT), sum(input_tokens) FROM runs")),
    Timing("b_runs_failed_50", "`lousho runs --failed --limit 50` (cli.newest_runs)", _cli_failed_50),
    Timing("c_failed_by_agent_revision", "failed runs by agent and revision",
           _sql("SELECT agent, harness_revision, count(*) FROM runs "
                "WHERE status = 'error' OR passed = false GROUP BY ALL")),
    Timing("d_one_run", "one run by id (`lousho runs show`'s summary query)",
           _sql(ONE_RUN, lambda ctx: [ctx["run_id"]])),
    Timing("e_runs_show", "`lousho runs show RUN_ID`: summary, span tree and scores", _runs_show),
    Timing("g_page_runs", f"the page's runs list of {common.AGENTS[0]!r} (newest 50)", _page_runs),
    Timing("h_pass_rate", f"{common.AGENTS[0]!r}'s pass rate per revision (analysis.runs + pass_rates)",
           _pass_rate),
    Timing("i_monitor_poll", f"the regression trigger's poll of {common.AGENTS[0]!r}", _monitor),
    Timing("j_sessions", "the sessions table, fully aggregated",
           _sql("SELECT count(*), sum(turns), avg(pass_rate) FROM sessions")),
    Timing("k_page_sessions", "the page's sessions list (newest 50, 20 run ids each)", _page_sessions),
    Timing("l_cli_sessions", "`lousho sessions` (newest 50, every run id)", _cli_sessions),
    Timing("m_one_session", "one session's run ids", _sql("SELECT run_ids FROM sessions WHERE session_id = ?",
                                                         lambda ctx: [ctx["session_id"]])),
]


def _cases_from_failures() -> Timing | None:
    """analysis.cases_from_failures over this store, when that part is there (it is built apart)."""
    try:
        from lousho.analysis.cases import cases_from_failures
    except ImportError:
        return None

    def run(client: StoreClient, ctx: dict[str, Any]) -> int:
        return cases_from_failures(client, common.AGENTS[0], revision="live").height

    return Timing("f_cases_from_failures", f"analysis.cases_from_failures({common.AGENTS[0]!r}, live)", run)


CLI_LIMIT_S = 0.3
CLI_ARGS = ("runs", "--failed", "--limit", "50")


def time_cli(path: Path, repeats: int) -> dict[str, Any]:
    """`lousho runs --failed --limit 50` as a user runs it: a new process each time, start-up included,
    against a daemon serving the store; median wall time of ``repeats`` after a warm-up."""
    script = Path(sys.executable).with_name("lousho")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "lousho"]
    daemon = start_daemon(path)
    try:
        argv = [*command, *CLI_ARGS, "--url", daemon.url]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)
        samples, cpu = [], []
        for _ in range(repeats):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True, timeout=60)
            samples.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    finally:
        daemon.stop()
    med = common.median(samples)
    return {"name": "k_cli_runs_failed_50_process", "description": "`lousho runs --failed --limit 50`, "
            "a new process against the daemon, start-up included", "rows": 50, "median_s": med,
            "min_s": min(samples), "max_s": max(samples), "samples_s": samples, "limit_s": CLI_LIMIT_S,
            "ratio_to_limit": med / CLI_LIMIT_S,
            # The process's own CPU time: what the wall time is on an idle machine, give or take I/O.
            "cpu_median_s": common.median(cpu)}


def time_all(path: Path, ctx: dict[str, Any], repeats: int, quiet: bool, suffix: str) -> list[dict[str, Any]]:
    results = []
    client = connect(path)
    try:
        for timing in timings():
            result = time_one(timing, client, ctx, repeats)
            result["name"] += suffix
            results.append(result)
            common.say(quiet, f"  {result['name']:<33} {result['median_s']:8.3f} s  "
                       f"({result['ratio_to_limit']:.2f}x the {timing.limit_s:g} s limit)")
    finally:
        client.close()
    return results


def timings() -> list[Timing]:
    extra = _cases_from_failures()
    return TIMINGS + ([extra] if extra is not None and extra.name not in {t.name for t in TIMINGS} else [])


def time_one(timing: Timing, client: StoreClient, ctx: dict[str, Any], repeats: int) -> dict[str, Any]:
    rows = timing.run(client, ctx)  # warm-up
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        timing.run(client, ctx)
        samples.append(time.perf_counter() - started)
    med = common.median(samples)
    return {
        "name": timing.name, "description": timing.description, "rows": rows,
        "median_s": med, "min_s": min(samples), "max_s": max(samples), "samples_s": samples,
        "limit_s": timing.limit_s, "ratio_to_limit": med / timing.limit_s,
    }


# --- when the view is over its limit: where the time goes, and rewrites ---


def explain(path: Path, query: str, top: int = 12) -> dict[str, Any]:
    """The heaviest operators of ``query`` by their own time (EXPLAIN ANALYZE's JSON profile)."""
    con = open_read_only(path)
    try:
        con.execute("PRAGMA enable_profiling = 'no_output'")  # collect, print nothing
        con.execute("SET profiling_mode = 'detailed'")
        con.execute(query).fetchall()
        profile = json.loads(con.get_profiling_information(format="json"))
    finally:
        con.close()
    found: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        name = node.get("name") or node.get("operator_name") or node.get("operator_type")
        seconds = node.get("timing", node.get("operator_timing"))
        if name and seconds is not None:
            found.append({
                "operator": str(name).strip(), "seconds": float(seconds),
                "rows": node.get("intermediate_rows", node.get("operator_cardinality")),
                "detail": _detail(node.get("extra_info") or {}),
            })
        for child in node.get("children", []):
            walk(child)

    roots = profile.get("operator")
    for root in roots if isinstance(roots, list) else [profile]:
        walk(root)
    query_info = profile.get("query") or {}
    total = float(query_info.get("total_time") or profile.get("latency") or 0.0)
    cpu = float(query_info.get("cpu_time") or 0.0)
    operators_s = sum(f["seconds"] for f in found) or 1.0
    found.sort(key=lambda f: f["seconds"], reverse=True)
    for f in found:
        f["share"] = f["seconds"] / operators_s
    system = profile.get("system") or {}
    return {"total_s": total, "cpu_s": cpu, "operators_s": operators_s,
            "peak_buffer_mib": (system.get("peak_buffer_memory") or 0) / 2**20, "top": found[:top]}


def _detail(extra: dict[str, Any]) -> str:
    parts = []
    for key in ("Table", "Groups", "Aggregates", "Join Type", "Conditions", "Filters", "CTE Name"):
        if key in extra:
            value = extra[key]
            text = value if isinstance(value, str) else " ".join(map(str, value))
            text = re.sub(r"\s+", " ", text)[:80]
            parts.append(f"{key}: {text}")
    return "; ".join(parts)


AGGREGATE = "SELECT count(*), avg(passed::INT), sum(input_tokens) FROM runs"
def investigate(path: Path, quiet: bool) -> dict[str, Any]:
    common.say(quiet, "some reader query is over its limit: EXPLAIN ANALYZE ...")
    return {
        "explain_aggregate": explain(path, AGGREGATE),
        "explain_failed_50": explain(path, FAILED_LIST.replace("LIMIT ?", "LIMIT 50")),
    }


# --- main ---


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--runs", type=int, default=1_000_000, help="runs in the store (about 10 spans each)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats after one warm-up; median quoted")
    p.add_argument("--rebuild", action="store_true", help="regenerate the cached store")
    p.add_argument("--tail", type=int, default=20_000, help="unfolded spans for the second round (0: none)")
    p.add_argument("--no-explain", dest="explain", action="store_false",
                   help="skip EXPLAIN ANALYZE when a query is over its limit")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = p.parse_args(argv)
    if args.runs < 1 or args.repeats < 1:
        p.error("--runs and --repeats must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    path, generated_s = ensure_store(args.runs, args.json, args.rebuild)
    fold_tail(path)
    store = describe_store(path)
    generated = "" if generated_s is None else f", generated in {generated_s:.0f} s"
    common.say(args.json, f"store {path} ({store['spans']:,} spans, {store['runs']:,} runs, "
               f"{store['file_mib']:.0f} MiB){generated}")
    ctx = {"run_id": store["sample_run_id"], "session_id": store["sample_session_id"]}
    doc: dict[str, Any] = {
        "benchmark": "query", "command": common.reproduce_command(), "store": store,
        "store_path": str(path), "generated_s": generated_s, "repeats": args.repeats,
        "cpus": os.cpu_count(), "duckdb": duckdb.__version__, "limit_s": LIMIT_S,
    }
    results = []
    machine_before, own_before, wall_before = common.machine_cpu_s(), os.times(), time.perf_counter()
    common.say(args.json, "nothing unfolded:")
    results += time_all(path, ctx, args.repeats, args.json, "")
    # The CLI's daemon folds at start: timed only with nothing to fold.
    result = time_cli(path, args.repeats)
    results.append(result)
    common.say(args.json, f"  {result['name']:<28} {result['median_s']:8.3f} s  "
               f"({result['ratio_to_limit']:.2f}x the {CLI_LIMIT_S:g} s limit; {result['cpu_median_s']:.3f} s CPU)")
    if args.tail:
        try:
            doc["tail_spans"] = add_tail(path, store["runs"], args.tail)
            common.say(args.json, f"with {doc['tail_spans']:,} spans unfolded:")
            results += time_all(path, ctx, args.repeats, args.json, "_tail")
        finally:
            fold_tail(path)
    doc["timings"] = results
    # What else ran meanwhile (other sessions' tests, say): the timings are as good as this is small.
    machine_after, own_after, wall = common.machine_cpu_s(), os.times(), time.perf_counter() - wall_before
    own = (own_after.user + own_after.system) - (own_before.user + own_before.system)
    doc["own_cpu_cores"] = own / wall
    doc["other_cpu_cores"] = max(0.0, (machine_after["busy"] - machine_before["busy"] - own) / wall)
    doc["steal_cpu_cores"] = (machine_after["steal"] - machine_before["steal"]) / wall
    if args.explain and any(r["ratio_to_limit"] > 1 for r in results if r["name"] != "k_cli_runs_failed_50_process"):
        doc["investigation"] = investigate(path, args.json)
    doc["total_s"] = time.perf_counter() - started
    if args.json:
        common.emit_json(doc)
    else:
        print_report(doc)
    return 0


def print_report(doc: dict[str, Any]) -> None:
    s = doc["store"]
    print()
    print(f"lousho runs table over {s['runs']:,} runs / {s['spans']:,} spans ({s['file_mib']:.0f} MiB), "
          f"read-only via lousho.observe.connect; median of {doc['repeats']} after a warm-up")
    for r in doc["timings"]:
        flag = "over" if r["ratio_to_limit"] > 1 else "ok"
        cpu = f" ({r['cpu_median_s']:.3f} s CPU)" if "cpu_median_s" in r else ""
        print(f"  {r['name']:<33} {r['median_s']:8.3f} s  {r['ratio_to_limit']:6.2f}x limit  {flag:<4} "
              f"{r['description']}{cpu}")
    print(f"  during these timings: this process {doc['own_cpu_cores']:.2f} cores, the rest of the machine "
          f"{doc['other_cpu_cores']:.2f} cores busy, {doc['steal_cpu_cores']:.2f} stolen by the hypervisor")
    if "investigation" in doc:
        print_investigation(doc["investigation"])
    print(f"total {doc['total_s']:.0f} s")
    print(f"reproduce: {doc['command']}")


def print_investigation(inv: dict[str, Any]) -> None:
    for key, label in (("explain_aggregate", "a (aggregate)"), ("explain_failed_50", "b (failed, 50)")):
        e = inv[key]
        print(f"  EXPLAIN ANALYZE of {label}: {e['total_s']:.2f} s wall, {e['cpu_s']:.2f} s CPU, peak buffer "
              f"{e['peak_buffer_mib']:.0f} MiB; operators by own CPU time:")
        for f in e["top"][:8]:
            print(f"    {f['seconds']:7.2f} s {f['share']:6.1%}  {f['operator']:<16} rows={f['rows']:<9} "
                  f"{f['detail'][:100]}")


if __name__ == "__main__":
    sys.exit(main())
