"""Reader queries over a large store: the ``runs`` view and what ``lousho runs`` asks of it.

A store of ``--runs`` runs (default 1,000,000, about 10,000,000 spans) is generated directly in
DuckDB, into the real ``spans`` and ``scores`` tables that ``SpanStore`` creates, so the schema and
the ``runs`` view are the daemon's. Each run is one trace: an ``invoke_agent`` root carrying the run
attributes, 1 to 8 steps of ``chat`` + ``execute_tool``, and one pass/fail score; about 20% of runs
fail (a quarter of those in an error status). The file is cached under ``.lousho/bench/``, keyed by
size, generator and the tables' SQL; views hold no data, so a changed view is re-applied to the
cached file instead of regenerating it.

Each query is timed the way readers run it (``lousho.observe.connect(path)``: a read-only open,
Arrow then Polars), median of ``--repeats`` after one warm-up, as a ratio to its limit (1 s). When
one is over, the script shows where the time goes (EXPLAIN ANALYZE's profile) and times, with
their answers checked against the view's: rewrites of the view (inline ``WITH runs AS (...)``),
the CLI's questions asked through ``runs_select(filter)`` so they narrow before aggregating, and the
view kept as a table. All of it on the read-only connection: lousho/ itself is never touched.

The hook for more timings is ``TIMINGS`` (name, description, callable taking the client and a
context, limit). ``analysis.cases_from_failures`` is timed too when that module is importable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as common
import duckdb

from lousho.observe import connect, schema
from lousho.observe.cli import RUN_COLUMNS, newest_runs
from lousho.observe.client import StoreClient
from lousho.observe.runs_view import runs_select
from lousho.observe.store import SpanStore, open_read_only

GENERATOR_VERSION = 1
LIMIT_S = 1.0
CHUNK_RUNS = 100_000
RUN_GAP_NS = 2_600_000_000  # a run every 2.6 s: 1M runs cover about a month
CASES = 200


# --- the store ---


def _statements() -> list[str]:
    return [s for _, statements in schema.MIGRATIONS for s in statements]


def _is_view(statement: str) -> bool:
    return " VIEW " in statement.upper()


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def cache_path(runs: int) -> Path:
    """The cached store for ``runs``, keyed by size, generator and the tables' SQL. Views hold no
    data: a changed view is re-applied to the cached file (``refresh_views``), not regenerated."""
    tables = [s for s in _statements() if not _is_view(s)]
    digest = _digest([str(GENERATOR_VERSION), *tables])
    return common.BENCH_DIR / f"query-{runs}-runs-{digest}.duckdb"


def refresh_views(path: Path) -> bool:
    """Make the cached file's views the current code's (its migrations' view statements, in
    order); a sidecar holds the digest of what was applied. Returns whether anything changed."""
    views = [s for s in _statements() if _is_view(s)]
    marker = path.with_name(path.name + ".views")
    wanted = _digest(views)
    if marker.exists() and marker.read_text().strip() == wanted:
        return False
    con = duckdb.connect(str(path))
    try:
        for statement in views:
            con.execute(statement)
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
INSERT INTO spans
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
    '{"service.name":"bench-agent","telemetry.sdk.language":"python"}' AS resource,
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
    NULL AS output_text
FROM t
"""

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
        || '"gen_ai.evaluation.score.label":"pass"}' END AS attributes
FROM runs
"""


def ensure_store(runs: int, quiet: bool, rebuild: bool = False) -> tuple[Path, float | None]:
    """The cached store for ``runs``, generated when missing; returns it and the generation time."""
    path = cache_path(runs)
    if path.exists() and not rebuild:
        if refresh_views(path):
            common.say(quiet, "  the runs view changed in the code: re-applied it to the cached store")
        return path, None
    common.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    for stale in (partial, partial.with_name(partial.name + ".wal")):
        stale.unlink(missing_ok=True)
    started = time.perf_counter()
    store = SpanStore(partial)  # the real schema: tables, keys and the runs view
    store.close()
    con = duckdb.connect(str(partial))
    try:
        for lo in range(0, runs, CHUNK_RUNS):
            hi = min(lo + CHUNK_RUNS, runs)
            con.execute("BEGIN")
            con.execute(_INSERT_SPANS, [lo, hi])
            con.execute(_INSERT_SCORES, [lo, hi])
            con.execute("COMMIT")
            common.say(quiet, f"  generated runs {hi:,}/{runs:,} "
                       f"({time.perf_counter() - started:.0f} s)")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    os.replace(partial, path)
    partial.with_name(partial.name + ".wal").unlink(missing_ok=True)
    path.with_name(path.name + ".views").unlink(missing_ok=True)
    refresh_views(path)
    return path, time.perf_counter() - started


def describe_store(path: Path) -> dict[str, Any]:
    con = open_read_only(path)
    try:
        spans, roots = con.execute(
            "SELECT count(*), count(run_id) FROM spans").fetchall()[0]
        scores, failed = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE NOT passed) FROM scores").fetchall()[0]
        errored = con.execute(
            "SELECT count(*) FROM spans WHERE run_id IS NOT NULL AND status_code = 'ERROR'").fetchall()[0][0]
        some_run = con.execute(
            "SELECT run_id FROM spans WHERE run_id IS NOT NULL ORDER BY span_key LIMIT 1").fetchall()[0][0]
    finally:
        con.close()
    return {
        "spans": spans, "runs": roots, "scores": scores, "failed_scores": failed,
        "errored_runs": errored, "file_mib": path.stat().st_size / 2**20, "sample_run_id": some_run,
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
# What `lousho runs show` asks now: the one run, narrowed before the aggregation.
ONE_RUN_NARROWED = f"SELECT {RUN_COLUMNS}, input, output FROM ({runs_select('run_id = ?')})"


def _cli_failed_50(client: StoreClient, ctx: dict[str, Any]) -> int:
    """`lousho runs --failed --limit 50` as the CLI asks it (cli.newest_runs: a widening window)."""
    return newest_runs(client, agent=None, failed=True, limit=50).height


def _runs_show(client: StoreClient, ctx: dict[str, Any]) -> int:
    """All three queries of ``lousho runs show RUN_ID`` (cli.runs_show)."""
    run_id = ctx["run_id"]
    traces = "SELECT DISTINCT trace_id FROM spans WHERE run_id = ?"
    rows = client.sql(ONE_RUN_NARROWED, [run_id]).height
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
TIMINGS: list[Timing] = [
    Timing("a_runs_aggregate", "the runs view, fully aggregated",
           _sql("SELECT count(*), avg(passed::INT), sum(input_tokens) FROM runs")),
    Timing("b_runs_failed_50", "`lousho runs --failed --limit 50` (cli.newest_runs)", _cli_failed_50),
    Timing("c_failed_by_agent_revision", "failed runs by agent and revision",
           _sql("SELECT agent, harness_revision, count(*) FROM runs "
                "WHERE status = 'error' OR passed = false GROUP BY ALL")),
    Timing("d_one_run", "one run by id (`lousho runs show`'s summary query)",
           _sql(ONE_RUN_NARROWED, lambda ctx: [ctx["run_id"]])),
    Timing("e_runs_show", "`lousho runs show RUN_ID`: summary, span tree and scores", _runs_show),
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


def view_sql() -> str:
    """The runs view's SELECT as the store defines it (the last migration statement creating it)."""
    text = ""
    for statement in _statements():
        if re.search(r"VIEW\s+runs\s+AS", statement):
            text = statement
    return re.split(r"VIEW\s+runs\s+AS", text, maxsplit=1)[1].strip()


AGGREGATE = "SELECT count(*), avg(passed::INT), sum(input_tokens) FROM runs"
BY_AGENT = ("SELECT agent, harness_revision, count(*) FROM runs "
            "WHERE status = 'error' OR passed = false GROUP BY ALL ORDER BY ALL")
# A fingerprint of every column of every run, to check that a rewrite answers as the view does.
FINGERPRINT = (
    "SELECT count(*), sum(hash(run_id, agent, harness_revision, case_id, conversation_id, run_kind, "
    "attempts, started_ns, ended_at, status, error_type, error_message, input, output, input_tokens, "
    "output_tokens, round(cost_usd, 9), model_calls, tool_calls, model, passed, probe, healed_from, "
    "traffic_arm, last_trace_id)) FROM runs"
)

# A rewrite of the view: one scan and one GROUP BY trace_id of spans gives both each trace's totals
# and its root's fields (the earliest span carrying a run id), instead of grouping the run-carrying
# spans by (run_id, trace_id), grouping every span by trace_id again, and joining the two. Same
# answer while a trace carries one run id (each attempt is its own trace); checked below.
ONE_PASS_VIEW = """
WITH per_trace AS (
    SELECT trace_id,
        arg_min(run_id, start_ns) FILTER (WHERE run_id IS NOT NULL) AS run_id,
        min(start_ns) FILTER (WHERE run_id IS NOT NULL) AS start_ns,
""" + "".join(
    f"        arg_min({c}, start_ns) FILTER (WHERE run_id IS NOT NULL) AS {c},\n"
    for c in ("agent_name", "harness_revision", "case_id", "conversation_id", "run_kind", "healed_from",
              "probe", "traffic_arm", "status_code", "status_message", "error_type", "input", "output")
) + """        max(end_ns) AS end_ns,
        sum(input_tokens) AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cost_usd) AS cost_usd,
        count(*) FILTER (WHERE operation IN ('chat', 'text_completion', 'generate_content'))
            AS model_calls,
        count(*) FILTER (WHERE operation = 'execute_tool') AS tool_calls,
        any_value(agent_name) AS any_agent,
        any_value(request_model) AS any_model,
        arg_max(error_type, end_ns) FILTER (WHERE status_code = 'ERROR') AS last_error_type,
        arg_max(status_message, end_ns) FILTER (WHERE status_code = 'ERROR') AS last_error_message
    FROM spans
    GROUP BY trace_id
    HAVING count(run_id) > 0
), verdict AS (
    SELECT trace_id, bool_and(passed) AS passed
    FROM scores WHERE passed IS NOT NULL
    GROUP BY trace_id
)
SELECT
    a.run_id,
    arg_max(coalesce(a.agent_name, a.any_agent), a.start_ns) AS agent,
    arg_max(a.harness_revision, a.start_ns) AS harness_revision,
    arg_max(a.case_id, a.start_ns) AS case_id,
    arg_max(a.conversation_id, a.start_ns) AS conversation_id,
    arg_max(a.run_kind, a.start_ns) AS run_kind,
    count(*) AS attempts,
    make_timestamp(min(a.start_ns) // 1000) AS started_at,
    make_timestamp(max(a.end_ns) // 1000) AS ended_at,
    (max(a.end_ns) - min(a.start_ns)) / 1e9 AS duration_s,
    CASE WHEN arg_max(a.status_code, a.start_ns) = 'ERROR' THEN 'error' ELSE 'ok' END AS status,
    arg_max_null(coalesce(a.error_type, a.last_error_type), a.start_ns) AS error_type,
    arg_max_null(coalesce(a.status_message, a.last_error_message), a.start_ns) AS error_message,
    arg_min(a.input, a.start_ns) AS input,
    arg_max_null(a.output, a.start_ns) AS output,
    sum(a.input_tokens) AS input_tokens,
    sum(a.output_tokens) AS output_tokens,
    sum(a.cost_usd) AS cost_usd,
    sum(a.model_calls) AS model_calls,
    sum(a.tool_calls) AS tool_calls,
    arg_max(a.any_model, a.start_ns) AS model,
    arg_max(v.passed, a.start_ns) FILTER (WHERE v.passed IS NOT NULL) AS passed,
    coalesce(bool_or(a.probe), false) AS probe,
    arg_max(a.healed_from, a.start_ns) AS healed_from,
    arg_max(a.traffic_arm, a.start_ns) AS traffic_arm,
    arg_max(a.trace_id, a.start_ns) AS last_trace_id,
    min(a.start_ns) AS started_ns
FROM per_trace a
LEFT JOIN verdict v USING (trace_id)
GROUP BY a.run_id
"""

_SEMI_JOIN = re.compile(r"\n[ \t]*WHERE trace_id IN \(SELECT trace_id FROM "
                        r"(?:attempt|spans WHERE run_id IS NOT NULL)\)[ \t]*\n")


def _no_semi_join() -> str | None:
    """The view without per_trace's ``WHERE trace_id IN (...)``: the inner join with the attempts
    drops the traces without a run anyway, and here it costs a hash build plus 10M probes."""
    body, n = _SEMI_JOIN.subn("\n", view_sql())
    return body if n == 1 else None


REWRITES: dict[str, Callable[[], str | None]] = {
    "no_trace_semi_join": _no_semi_join,
    "one_pass_per_trace": lambda: ONE_PASS_VIEW,
}


def _median_time(
    con: duckdb.DuckDBPyConnection, query: str, params: list[Any], repeats: int
) -> tuple[float, list]:
    rows = con.execute(query, params).fetchall()  # warm-up
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        con.execute(query, params).fetchall()
        samples.append(time.perf_counter() - started)
    return common.median(samples), rows


def time_rewrites(path: Path, repeats: int) -> list[dict[str, Any]]:
    """Each candidate view, inline as ``WITH runs AS (...)``, on queries a, b and c, with answers
    checked against the view's. Candidates take turns within each repeat, so a busy spell on the
    machine costs them alike rather than whichever ran then."""
    outers = {"a_runs_aggregate": (AGGREGATE, []), "b_runs_failed_50": (FAILED_LIST, [50]),
              "c_failed_by_agent_revision": (BY_AGENT, [])}
    candidates: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for name, build in [("view_as_defined", view_sql), *REWRITES.items()]:
        body = build()
        if body is None:
            out.append({"name": name, "skipped": "does not apply to the current view"})
        else:
            candidates[name] = body
    con = open_read_only(path)
    try:
        answers: dict[str, list[Any]] = {name: [] for name in candidates}
        samples: dict[tuple[str, str], list[float]] = {}
        for outer_name, (outer, params) in outers.items():
            for name, body in candidates.items():  # warm-up, and the answer to compare
                answers[name].append(con.execute(f"WITH runs AS ({body}) {outer}", params).fetchall())
            for _ in range(repeats):
                for name, body in candidates.items():
                    started = time.perf_counter()
                    con.execute(f"WITH runs AS ({body}) {outer}", params).fetchall()
                    samples.setdefault((name, outer_name), []).append(time.perf_counter() - started)
        for name, body in candidates.items():
            answers[name].append(con.execute(f"WITH runs AS ({body}) {FINGERPRINT}").fetchall())
    finally:
        con.close()
    expected = answers.get("view_as_defined")
    for name in candidates:
        entry: dict[str, Any] = {"name": name}
        for outer_name in outers:
            entry[outer_name + "_s"] = common.median(samples[(name, outer_name)])
        entry["same_result"] = answers[name] == expected
        out.append(entry)
    return out


def _runs_select() -> Callable[[str], str] | None:
    try:
        from lousho.observe.runs_view import runs_select
    except ImportError:
        return None
    return runs_select


def time_narrowed(path: Path, repeats: int, ctx: dict[str, Any]) -> dict[str, Any]:
    """b and d asked as ``runs_select(filter)`` (lousho.observe.runs_view), which narrows the runs
    before aggregating, instead of filtering the whole view; answers checked against the view."""
    runs_select = _runs_select()
    if runs_select is None:
        return {"skipped": "lousho.observe.runs_view.runs_select is not there"}
    con = open_read_only(path)
    out: dict[str, Any] = {}
    try:
        one = f"SELECT {RUN_COLUMNS}, input, output FROM ({runs_select('run_id = ?')})"
        out["d_one_run_s"], got = _median_time(con, one, [ctx["run_id"]], repeats)
        out["d_same_result"] = got == con.execute(ONE_RUN, [ctx["run_id"]]).fetchall()
        newest = con.execute("SELECT max(start_ns) FROM spans WHERE run_id IS NOT NULL").fetchall()[0][0]

        def newest_failed() -> list[tuple]:
            # Widen a window back from the newest run until it holds 50 failed runs that started in
            # it: those are then the 50 newest. Exact; the last step is the whole store.
            for hours in (1, 24, 24 * 7, 24 * 30, None):
                since = newest - hours * 3_600_000_000_000 if hours else -(2**63)
                rows = con.execute(
                    f"SELECT {RUN_COLUMNS} FROM ({runs_select('start_ns >= ?')}) "
                    "WHERE (status = 'error' OR passed = false) AND started_ns >= ? "
                    "ORDER BY started_ns DESC LIMIT 50", [since, since]).fetchall()
                if len(rows) == 50 or hours is None:
                    return rows
            return []

        newest_failed()
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            got = newest_failed()
            samples.append(time.perf_counter() - started)
        out["b_runs_failed_50_s"] = common.median(samples)
        out["b_same_result"] = got == con.execute(FAILED_LIST, [50]).fetchall()
        recent = [r[0] for r in con.execute(
            "SELECT run_id FROM spans WHERE run_id IS NOT NULL ORDER BY start_ns DESC LIMIT 1000").fetchall()]
        out["refresh_1000_newest_runs_s"], _ = _median_time(
            con, f"SELECT * FROM ({runs_select('run_id IN (SELECT unnest(?::VARCHAR[]))')})", [recent],
            repeats)
    finally:
        con.close()
    return out


def materialized(path: Path, repeats: int, ctx: dict[str, Any]) -> dict[str, Any]:
    """The runs view kept as a table (DESIGN §3 allows it): build once, then each query on it."""
    con = open_read_only(path)
    try:
        started = time.perf_counter()
        con.execute("CREATE TEMP TABLE runs_table AS SELECT * FROM runs")
        out: dict[str, Any] = {"build_s": time.perf_counter() - started}
        queries = {
            "a_runs_aggregate": (AGGREGATE, []),
            "b_runs_failed_50": (FAILED_LIST, [50]),
            "c_failed_by_agent_revision": (BY_AGENT, []),
            "d_one_run": (ONE_RUN, [ctx["run_id"]]),
        }
        for name, (query, params) in queries.items():
            on_table = re.sub(r"\bFROM runs\b", "FROM runs_table", query)
            out[name + "_s"], _ = _median_time(con, on_table, params, repeats)
    finally:
        con.close()
    return out


def investigate(path: Path, repeats: int, ctx: dict[str, Any], quiet: bool) -> dict[str, Any]:
    common.say(quiet, "some reader query is over its limit: EXPLAIN ANALYZE and rewrites ...")
    out: dict[str, Any] = {
        "explain_aggregate": explain(path, AGGREGATE),
        "explain_failed_50": explain(path, FAILED_LIST.replace("LIMIT ?", "LIMIT 50")),
    }
    common.say(quiet, "  view rewrites ...")
    out["rewrites"] = time_rewrites(path, repeats)
    common.say(quiet, "  narrowed queries ...")
    out["narrowed"] = time_narrowed(path, repeats, ctx)
    common.say(quiet, "  runs kept as a table ...")
    out["materialized"] = materialized(path, repeats, ctx)
    return out


# --- main ---


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--runs", type=int, default=1_000_000, help="runs in the store (about 10 spans each)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats after one warm-up; median quoted")
    p.add_argument("--rebuild", action="store_true", help="regenerate the cached store")
    p.add_argument("--no-explain", dest="explain", action="store_false",
                   help="skip EXPLAIN ANALYZE and the rewrites when a query is over its limit")
    p.add_argument("--investigate-repeats", type=int, default=2,
                   help="timed repeats of each rewrite and alternative")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = p.parse_args(argv)
    if args.runs < 1 or args.repeats < 1 or args.investigate_repeats < 1:
        p.error("--runs and --repeats must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    path, generated_s = ensure_store(args.runs, args.json, args.rebuild)
    store = describe_store(path)
    generated = "" if generated_s is None else f", generated in {generated_s:.0f} s"
    common.say(args.json, f"store {path} ({store['spans']:,} spans, {store['runs']:,} runs, "
               f"{store['file_mib']:.0f} MiB){generated}")
    ctx = {"run_id": store["sample_run_id"]}
    doc: dict[str, Any] = {
        "benchmark": "query", "command": common.reproduce_command(), "store": store,
        "store_path": str(path), "generated_s": generated_s, "repeats": args.repeats,
        "cpus": os.cpu_count(), "duckdb": duckdb.__version__, "limit_s": LIMIT_S,
    }
    results = []
    machine_before, own_before, wall_before = common.machine_cpu_s(), os.times(), time.perf_counter()
    client = connect(path)
    try:
        for timing in timings():
            result = time_one(timing, client, ctx, args.repeats)
            results.append(result)
            common.say(args.json, f"  {timing.name:<28} {result['median_s']:8.3f} s  "
                       f"({result['ratio_to_limit']:.2f}x the {timing.limit_s:g} s limit)")
    finally:
        client.close()
    doc["timings"] = results
    # What else ran meanwhile (other sessions' tests, say): the timings are as good as this is small.
    machine_after, own_after, wall = common.machine_cpu_s(), os.times(), time.perf_counter() - wall_before
    own = (own_after.user + own_after.system) - (own_before.user + own_before.system)
    doc["own_cpu_cores"] = own / wall
    doc["other_cpu_cores"] = max(0.0, (machine_after["busy"] - machine_before["busy"] - own) / wall)
    doc["steal_cpu_cores"] = (machine_after["steal"] - machine_before["steal"]) / wall
    if args.explain and any(r["ratio_to_limit"] > 1 for r in results):
        doc["investigation"] = investigate(path, args.investigate_repeats, ctx, args.json)
    doc["total_s"] = time.perf_counter() - started
    if args.json:
        common.emit_json(doc)
    else:
        print_report(doc)
    return 0


def print_report(doc: dict[str, Any]) -> None:
    s = doc["store"]
    print()
    print(f"lousho runs view over {s['runs']:,} runs / {s['spans']:,} spans ({s['file_mib']:.0f} MiB), "
          f"read-only via lousho.observe.connect; median of {doc['repeats']} after a warm-up")
    for r in doc["timings"]:
        flag = "over" if r["ratio_to_limit"] > 1 else "ok"
        print(f"  {r['name']:<28} {r['median_s']:8.3f} s  {r['ratio_to_limit']:6.2f}x limit  {flag:<4} "
              f"{r['description']}")
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
    print("  the view rewritten (inline WITH runs AS (...)), seconds for a / b / c:")
    base = next((r for r in inv["rewrites"] if r["name"] == "view_as_defined"), None)
    for r in inv["rewrites"]:
        if "skipped" in r:
            print(f"    {r['name']:<22} skipped: {r['skipped']}")
            continue
        keys = ("a_runs_aggregate_s", "b_runs_failed_50_s", "c_failed_by_agent_revision_s")
        times = [r[k] for k in keys]
        speed = ""
        if base is not None and r is not base:
            ratios = [base[k] / t for k, t in zip(keys, times, strict=True)]
            speed = "  speedup " + " / ".join(f"{x:.2f}x" for x in ratios)
        print(f"    {r['name']:<22} " + " / ".join(f"{t:6.3f}" for t in times)
              + f"  same answers: {r['same_result']}{speed}")
    n = inv["narrowed"]
    if "skipped" in n:
        print(f"  narrowed before aggregating: skipped: {n['skipped']}")
    else:
        print(f"  narrowed before aggregating (runs_select(filter)): d by run_id {n['d_one_run_s']:.3f} s "
              f"(same: {n['d_same_result']}); b via a widening time window {n['b_runs_failed_50_s']:.3f} s "
              f"(same: {n['b_same_result']}); re-aggregating the 1,000 newest runs "
              f"{n['refresh_1000_newest_runs_s']:.3f} s")
    m = inv["materialized"]
    print(f"  runs kept as a table: built in {m['build_s']:.2f} s; then "
          + ", ".join(f"{k[:-2]} {v * 1e3:.1f} ms" for k, v in m.items() if k != "build_s"))


if __name__ == "__main__":
    sys.exit(main())
