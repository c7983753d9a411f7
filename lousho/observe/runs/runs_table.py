"""The kept runs: tables folded from the spans off the ack path, and the views that answer ``runs`` and
``sessions`` from them merged with the spans not folded yet.

Every commit stamps its spans and scores with ``commit_seq`` (store/span_store.py), one number per commit, rising.
The fold (``fold``, run by runs_fold.py) takes the committed rows with ``commit_seq`` above the
watermark (``runs_fold.watermark``), merges their partial aggregates (runs_parts.py) into
``run_trace_parts`` and ``run_attempt_parts``, recomputes the runs and sessions those traces touch in
``kept_runs`` and ``kept_sessions``, and advances the watermark: all in one transaction, so a reader
sees the kept tables and the watermark of one fold, never half of one.

The view ``runs`` answers what ``runs_view.runs_select()`` answers over every committed span: the kept
rows of the runs the tail (the rows above the watermark) does not touch, and the runs it touches
recomputed from their kept parts merged with the tail's partials. ``sessions`` is the same over the
sessions. The tail is the rows of the last commits (the fold runs when the writer
idles or the tail passes a bound), so what a query pays for it is bounded.

A span stored twice (possible only if the primary key on ``span_key`` goes) counts once when both
copies are in the tail: the tail is distinct by ``span_key``. A copy stored after its twin was folded
would count twice; the primary key rules that out today.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from lousho.observe.runs import runs_parts as p
from lousho.observe.runs.runs_view import RUN_AGGREGATE_ONE_ATTEMPT_APART, model_calls
from lousho.observe.runs.sessions_view import sessions_select, with_run_ids
from lousho.observe.runs.span_key_sql import halves

_TRACE_COLUMNS = p.names(p.TRACE_KEYS, p.TRACE_PARTS)
_ATTEMPT_COLUMNS = p.names(p.ATTEMPT_KEYS, p.ATTEMPT_PARTS)
_WATERMARK = "(SELECT watermark FROM runs_fold)"
# The rows above the watermark, each stored span once.
_DISTINCT_SPANS = f"SELECT DISTINCT ON ({halves()}) "
_TAIL_SPANS = (f"{_DISTINCT_SPANS}{', '.join(p.SPAN_INPUTS)} FROM spans "
               f"WHERE commit_seq > {_WATERMARK}")
_TAIL_SCORES = (f"SELECT DISTINCT ON ({halves()}, seq) trace_id, passed FROM scores "
                f"WHERE commit_seq > {_WATERMARK}")
# The views name the watermark as a literal, re-made by each fold (``views``): DuckDB then knows from the
# column's statistics that nothing is above it when the tail is empty and plans the merge away, where a
# subquery left it estimating a fifth of the spans and joining the parts tables whole.
_WATERMARK_LITERAL = "{watermark}"


def _implicit_attempts(trace_parts: str, runs: str | None) -> str:
    """The view's ``attempt`` rows of runs without a lousho run id, from the trace parts in
    ``trace_parts`` whose implicit run is among ``runs`` (SQL, a list or subquery; None: all)."""
    firsts = ", ".join(f"arg_min(h.{name}, h.start_ns) AS {name}" for name, _, _ in p.HEAD_FIELDS[3:8])
    return f"""
SELECT run_id, trace_id, min(h.start_ns) AS start_ns, {firsts},
    NULL::VARCHAR AS run_kind, NULL::VARCHAR AS healed_from, arg_min(h.probe, h.start_ns) AS probe,
    arg_min(h.traffic_arm, h.start_ns) AS traffic_arm, arg_min(h.status_code, h.start_ns) AS status_code,
    arg_min(h.status_message, h.start_ns) AS status_message, arg_min(h.error_type, h.start_ns) AS error_type,
    NULL::VARCHAR AS input, NULL::VARCHAR AS output, arg_min(h.agent_hint, h.start_ns) AS agent_hint, true AS implicit
FROM (
    SELECT implicit_run_id AS run_id, trace_id, inv_n, unnest(heads) AS h FROM {trace_parts}
    WHERE implicit_run_id IS NOT NULL {f"AND implicit_run_id IN {runs}" if runs else ""}
)
-- the trace's invoke_agent spans if it has any, else its roots
WHERE h.inv OR inv_n = 0
GROUP BY run_id, trace_id
"""


_EXPLICIT = ("run_id, trace_id, start_ns, agent_name, service_name, harness_revision, case_id, conversation_id, "
             "run_kind, healed_from, probe, traffic_arm, status_code, status_message, error_type, input, output, "
             "NULL::VARCHAR AS agent_hint, false AS implicit")
# The view's per_trace columns.
_PER_TRACE = ("trace_id, end_ns, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, "
              f"reasoning_tokens, cost_usd, reported_costs, priced_costs, {model_calls('model_spans')} AS model_calls, "
              "tool_calls, first_agent, "
              "first_model, first_provider, first_conversation_id, skills, agent_error, first_input_text, "
              "last_output_text, last_error_type, last_error_message, error_spans, model_print, any_print, "
              "version_revision")


def runs_from_parts(runs: str | None = None, traces: str = "(SELECT trace_id FROM attempt)", *,
                    trace_parts: str = "run_trace_parts", attempt_parts: str = "run_attempt_parts",
                    explicit: bool = True, implicit: bool = True) -> str:
    """The runs view's rows from parts: of the runs among ``runs`` (SQL list or subquery; None: all),
    whose traces are among ``traces``; only runs with a run id (``explicit``) or without one
    (``implicit``) when the caller knows there are no others among them."""
    where = f"WHERE run_id IN {runs}" if runs else ""
    attempts = ([f"SELECT {_EXPLICIT} FROM {attempt_parts} {where}"] if explicit else []) + \
        ([f"SELECT * FROM ({_implicit_attempts(trace_parts, runs)})"] if implicit else [])
    return f"""
WITH attempt AS (
    {" UNION ALL ".join(attempts)}
), per_trace AS (
    SELECT {_PER_TRACE} FROM {trace_parts} WHERE trace_id IN {traces}
), verdict AS (
    SELECT trace_id, passed FROM {trace_parts} WHERE passed IS NOT NULL AND trace_id IN {traces}
), {RUN_AGGREGATE_ONE_ATTEMPT_APART}"""


# --- the views: kept rows merged with the tail -------------------------------------------------------


def _kept(table: str, key_join: str) -> str:
    """The rows of the kept parts ``table`` that ``key_join`` (a join of its alias ``p``) keeps, found by their key
    columns before any other column is read: joined whole, a step read every column of every kept part (a
    million traces) to find the few a tail touches. DuckDB fetches rows by id without reading the others,
    as the fold's copies do (``_KEPT_COPIES``)."""
    return f"(SELECT * FROM {table} WHERE rowid IN (SELECT p.rowid FROM {table} p {key_join}))"


_SAME_ATTEMPT = "SEMI JOIN tail_attempt t ON p.run_id = t.run_id AND p.trace_id = t.trace_id"


# The steps from the tail to the rows of the runs it touches, in order: (name, SQL, materialized). The views
# run them as CTEs; the fold as temporary tables of those names, then writes them into the kept tables. Each
# CTE used more than once is MATERIALIZED: inlined, DuckDB would plan (and run) it once per use.
_STEPS: tuple[tuple[str, str, bool], ...] = (
    ("tail_spans", _TAIL_SPANS.replace(_WATERMARK, _WATERMARK_LITERAL), True),
    ("tail_scores", _TAIL_SCORES.replace(_WATERMARK, _WATERMARK_LITERAL), False),
    ("tail_trace", p.trace_batch("tail_spans", "tail_scores"), False),
    ("tail_attempt", p.attempt_batch("tail_spans"), False),
    # Per trace the tail touches: its kept parts merged with the tail's, and the implicit run it was
    # (``prior_run_id``) and is now.
    ("merged_trace", f"""
    SELECT *, {p.implicit_run_id()} AS implicit_run_id FROM (
        SELECT n.trace_id, {p.merged_select(p.TRACE_PARTS, 'o', 'n')}, o.implicit_run_id AS prior_run_id
        FROM tail_trace n
        LEFT JOIN {_kept('run_trace_parts', 'SEMI JOIN tail_trace t ON p.trace_id = t.trace_id')} o
            ON o.trace_id = n.trace_id)""", True),
    # including runs the tail makes disappear (an implicit run whose trace now has a run id)
    ("touched_runs", """
    SELECT DISTINCT run_id FROM (
        SELECT unnest([prior_run_id, implicit_run_id]) AS run_id FROM merged_trace
        UNION ALL SELECT unnest(run_ids) FROM merged_trace
    ) WHERE run_id IS NOT NULL""", True),
    ("merged_attempt", f"""
    SELECT n.run_id, n.trace_id, {p.merged_select(p.ATTEMPT_PARTS, 'o', 'n')}
    FROM tail_attempt n
    LEFT JOIN {_kept('run_attempt_parts', _SAME_ATTEMPT)} o
        ON o.run_id = n.run_id AND o.trace_id = n.trace_id""", True),
    # Every part of the touched runs, kept or merged.
    ("attempt_parts", f"""
    SELECT k.* FROM (SELECT {_ATTEMPT_COLUMNS}
                     FROM {_kept('run_attempt_parts', 'SEMI JOIN touched_runs t ON p.run_id = t.run_id')}) k
    ANTI JOIN merged_attempt m ON m.run_id = k.run_id AND m.trace_id = k.trace_id
    UNION ALL SELECT {_ATTEMPT_COLUMNS} FROM merged_attempt""", True),
    # Two lookups rather than one scan with "IN ... OR IN ...", which read every kept trace even with nothing
    # unfolded (a semi join with nothing to join stops its scan at once). The second takes only what the first
    # did not.
    ("trace_parts", f"""
    SELECT k.* FROM (
        SELECT {_TRACE_COLUMNS}, implicit_run_id
        FROM {_kept('run_trace_parts', 'SEMI JOIN touched_runs t ON p.implicit_run_id = t.run_id')}
        UNION ALL
        SELECT {_TRACE_COLUMNS}, implicit_run_id
        FROM {_kept('run_trace_parts', 'SEMI JOIN attempt_parts a ON p.trace_id = a.trace_id')}
        WHERE implicit_run_id IS NULL OR implicit_run_id NOT IN (SELECT run_id FROM touched_runs)) k
    ANTI JOIN merged_trace m ON m.trace_id = k.trace_id
    UNION ALL SELECT {_TRACE_COLUMNS}, implicit_run_id FROM merged_trace""", True),
    # The touched runs' rows.
    ("unfolded", "SELECT * FROM (" + runs_from_parts("(SELECT run_id FROM touched_runs)", trace_parts="trace_parts",
                                                     attempt_parts="attempt_parts") + ")", True),
)
_TAIL_CTES = ",\n".join(f"{name} AS {'MATERIALIZED ' if materialized else ''}({sql})"
                         for name, sql, materialized in _STEPS)

# Every run: the kept rows of the runs the tail does not touch, and the recomputed rows of the others.
_RUNS_CTES = f"""{_TAIL_CTES},
merged_runs AS (
    SELECT k.* FROM kept_runs k ANTI JOIN touched_runs t ON t.run_id = k.run_id
    UNION ALL SELECT * FROM unfolded
)"""
_RUNS_VIEW = f"CREATE OR REPLACE VIEW runs AS WITH {_RUNS_CTES} SELECT * FROM merged_runs"
# The sessions' rows, with the run ids of those the tail touches: the others' come from the kept runs, joined outside
# the CTEs, so that DuckDB drops that join when a query reads no run ids (sessions_view.with_run_ids).
_SESSION_ROWS = f"""(WITH {_RUNS_CTES},
touched AS MATERIALIZED (
    SELECT conversation_id FROM kept_runs WHERE run_id IN (SELECT run_id FROM touched_runs)
    UNION SELECT conversation_id FROM unfolded
)
SELECT k.*, NULL::VARCHAR[] AS own_run_ids FROM kept_sessions k ANTI JOIN touched t ON t.conversation_id = k.session_id
UNION ALL SELECT * EXCLUDE (run_ids), run_ids AS own_run_ids
FROM ({sessions_select('merged_runs', 'conversation_id IN (SELECT conversation_id FROM touched)')}))"""
_SESSIONS_VIEW = f"CREATE OR REPLACE VIEW sessions AS {with_run_ids(_SESSION_ROWS, 'kept_runs')}"


def views(watermark: int) -> tuple[str, str]:
    """The statements making the ``runs`` and ``sessions`` views for the kept tables at ``watermark``."""
    return tuple(view.replace(_WATERMARK_LITERAL, str(int(watermark))) for view in (_RUNS_VIEW, _SESSIONS_VIEW))

# --- the fold ------------------------------------------------------------------------------------------

# Before anything is written: the kept runs the tail touches (found once: their rows are deleted, their sessions
# made again) and the sessions touched. (A session's rows are made from the kept runs after they are written, by a
# scan of the columns they need: fetching them by row id cost more when a few sessions hold most runs.)
_BEFORE_WRITE = (
    ("kept_runs_hit",
     "SELECT rowid AS rid, conversation_id FROM kept_runs WHERE run_id IN (SELECT run_id FROM touched_runs)"),
    ("touched_sessions", """
SELECT DISTINCT conversation_id FROM (
    SELECT conversation_id FROM kept_runs_hit UNION ALL SELECT conversation_id FROM unfolded
) WHERE conversation_id IS NOT NULL"""),
)
# The kept rows the tail replaces, then their replacements: what the views compute, written down. Rows go by
# their row ids, found by key (``_KEPT_COPIES``, ``_BEFORE_WRITE``): a delete then reads no other column.
_WRITE_FOLD = (
    "DELETE FROM run_trace_parts WHERE rowid IN (SELECT rid FROM old_trace_hit)",
    f"INSERT INTO run_trace_parts ({_TRACE_COLUMNS}, prior_run_id, implicit_run_id) "
    f"SELECT {_TRACE_COLUMNS}, prior_run_id, implicit_run_id FROM merged_trace",
    "DELETE FROM run_attempt_parts WHERE rowid IN (SELECT o.rid FROM old_attempts o "
    "SEMI JOIN merged_attempt m ON o.run_id = m.run_id AND o.trace_id = m.trace_id)",
    f"INSERT INTO run_attempt_parts ({_ATTEMPT_COLUMNS}) SELECT {_ATTEMPT_COLUMNS} FROM merged_attempt",
    "DELETE FROM kept_runs WHERE rowid IN (SELECT rid FROM kept_runs_hit)",
    "INSERT INTO kept_runs SELECT * FROM unfolded",
    "DELETE FROM kept_sessions WHERE session_id IN (SELECT conversation_id FROM touched_sessions)",
    "INSERT INTO kept_sessions " + sessions_select(
        "kept_runs", "conversation_id IN (SELECT conversation_id FROM touched_sessions)", run_ids=False),
)


def fold(con: duckdb.DuckDBPyConnection) -> int:
    """Fold the committed spans and scores above the watermark into the kept tables and advance it, in
    one transaction on ``con`` (a cursor of its own: the writer's commits go on meanwhile). Returns the
    number of spans folded."""
    con.execute("BEGIN")
    try:
        watermark = con.execute("SELECT watermark FROM runs_fold").fetchall()[0][0]
        high = con.execute("SELECT greatest((SELECT max(commit_seq) FROM spans WHERE commit_seq > $1), "
                           "(SELECT max(commit_seq) FROM scores WHERE commit_seq > $1))", [watermark]).fetchall()[0][0]
        if high is None:
            con.execute("COMMIT")
            return 0
        folded = _build(con) if watermark < 0 else _fold_tail(con, watermark)
        # Rows above ``high`` committed after this transaction began: the next fold takes them.
        con.execute("UPDATE runs_fold SET watermark = ?", [high])
        for statement in views(high):
            con.execute(statement)
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # deliberate: the fold's own error is the one to report
        raise
    return folded


# The kept parts a fold reads, found by their keys first. The steps join the parts tables whole; run as they
# are, each join reads every column of every kept part, so the fold's cost grew with the store. Most of a
# tail's traces and runs are new: the fold first finds the row ids of the kept parts it touches by scanning
# only their key columns, copies just those rows (DuckDB fetches rows by id without reading the others), and
# runs the steps over the copies: the same rows, so the same answer.


@dataclass(frozen=True)
class _KeptCopy:
    name: str  # the temporary table holding the rows, with their row id as ``rid``
    table: str  # the kept table they are rows of
    rows: str  # SQL: the row ids (``rid``) of the rows the steps can read, by their key columns alone
    before: str  # the first step reading them
    read_by: tuple[str, ...]  # the steps reading the copy in place of ``table``


_KEPT_COPIES = (
    # the kept parts of the tail's traces: what merged_trace joins
    _KeptCopy("old_trace_hit", "run_trace_parts",
              "SELECT p.rowid AS rid FROM run_trace_parts p SEMI JOIN tail_trace t ON p.trace_id = t.trace_id",
              "merged_trace", ("merged_trace",)),
    # the kept attempts of the touched runs: what attempt_parts reads, and merged_attempt joins (a tail
    # attempt's run is among the touched runs: its trace's run_ids hold it)
    _KeptCopy("old_attempts", "run_attempt_parts",
              "SELECT p.rowid AS rid FROM run_attempt_parts p SEMI JOIN touched_runs t ON p.run_id = t.run_id",
              "merged_attempt", ("merged_attempt", "attempt_parts")),
    # trace_parts' own condition, over the key columns alone
    _KeptCopy("old_traces", "run_trace_parts",
              "SELECT rowid AS rid FROM run_trace_parts WHERE implicit_run_id IN (SELECT run_id FROM touched_runs) "
              "OR trace_id IN (SELECT trace_id FROM attempt_parts)",
              "trace_parts", ("trace_parts",)),
)
# The statements with nothing to do when a copy is empty (the usual case): skipped.
_SKIP_WITHOUT = {_WRITE_FOLD[0]: "old_trace_hit", _WRITE_FOLD[2]: "old_attempts"}
# The steps that are the tail's rows as they are when a copy is empty (the usual case: most of a tail's traces
# and runs are new), by the copy: views over those rows, where the merge would copy them, every column through a
# CASE (a quarter of a fold's time when every span is a run of its own).
_AS_THEY_ARE = {
    "merged_trace": ("old_trace_hit", f"""
    SELECT *, {p.implicit_run_id()} AS implicit_run_id FROM (
        SELECT n.trace_id, {p.alone_select(p.TRACE_PARTS, 'n')}, NULL::VARCHAR AS prior_run_id FROM tail_trace n)"""),
    "merged_attempt": ("old_attempts",
                       f"SELECT n.run_id, n.trace_id, {p.alone_select(p.ATTEMPT_PARTS, 'n')} FROM tail_attempt n"),
    "attempt_parts": ("old_attempts", f"SELECT {_ATTEMPT_COLUMNS} FROM merged_attempt"),
    "trace_parts": ("old_traces", f"SELECT {_TRACE_COLUMNS}, implicit_run_id FROM merged_trace"),
}


# The tail's aggregations by trace and by attempt with the keys of one row taken as they are (runs_parts.
# batch_one_apart), for a tail where most keys have one row, as when every span is a run; over traces of several
# spans the plain aggregation is the cheaper. With n rows and d keys at least 2d - n keys have one row: at
# d >= ONE_APART_SHARE * n, three quarters of them.
ONE_APART_SHARE = 0.8
_ONE_APART_STEPS = {
    "tail_trace": p.trace_batch("tail_spans", "tail_scores", one_apart=True),
    "tail_attempt": p.attempt_batch("tail_spans", one_apart=True),
}
_TAIL_SHAPE = ("SELECT count(*), count(DISTINCT trace_id), count(run_id), "
               "count(DISTINCT (run_id, trace_id)) FILTER (WHERE run_id IS NOT NULL) FROM tail_spans")


def one_apart_steps(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The steps of ``_ONE_APART_STEPS`` that this tail's shape favours."""
    rows, traces, with_run, attempts = con.execute(_TAIL_SHAPE).fetchall()[0]
    return {name for name, (n, d) in (("tail_trace", (rows, traces)), ("tail_attempt", (with_run, attempts)))
            if n and d >= ONE_APART_SHARE * n}


def _copy_kept(con: duckdb.DuckDBPyConnection, copy: _KeptCopy) -> int:
    """Copy the kept rows ``copy`` names into its temporary table; returns how many."""
    con.execute(f"CREATE TEMP TABLE {copy.name}_rows AS {copy.rows}")
    found = int(con.execute(f"SELECT count(*) FROM {copy.name}_rows").fetchall()[0][0])
    where = f"rowid IN (SELECT rid FROM {copy.name}_rows)" if found else "false"
    con.execute(f"CREATE TEMP TABLE {copy.name} AS SELECT rowid AS rid, * FROM {copy.table} WHERE {where}")
    return found


def _fold_tail(con: duckdb.DuckDBPyConnection, watermark: int) -> int:
    """The views' steps over the tail as temporary tables, then written into the kept tables."""
    names: list[tuple[str, str]] = []  # (kind, name): what to drop at the end
    found: dict[str, int] = {}
    # The tail is read distinct by span key (a copy that got past the writer's filter counts once), which
    # costs a hash of every column read; with no two rows of one key, as almost always, a plain read is the same.
    repeated = con.execute(f"SELECT count(*) - count(DISTINCT ({halves()})) FROM spans "
                           f"WHERE commit_seq > {int(watermark)}").fetchall()[0][0]
    one_apart: set[str] = set()
    try:
        for name, sql, _ in _STEPS:
            if name == "tail_spans" and not repeated:
                sql = sql.replace(_DISTINCT_SPANS, "SELECT ", 1)
            if name in one_apart:
                sql = _ONE_APART_STEPS[name]
            for copy in _KEPT_COPIES:
                if copy.before == name:
                    names += [("TABLE", f"{copy.name}_rows"), ("TABLE", copy.name)]
                    found[copy.name] = _copy_kept(con, copy)
                if name in copy.read_by:
                    sql = sql.replace(copy.table, copy.name)
            kind = "TABLE"
            if name in _AS_THEY_ARE and not found[_AS_THEY_ARE[name][0]]:
                kind, sql = "VIEW", _AS_THEY_ARE[name][1]
            names.append((kind, name))
            con.execute(f"CREATE TEMP {kind} {name} AS {sql.replace(_WATERMARK_LITERAL, str(int(watermark)))}")
            if name == "tail_spans":
                one_apart = one_apart_steps(con)
        for name, sql in _BEFORE_WRITE:
            names.append(("TABLE", name))
            con.execute(f"CREATE TEMP TABLE {name} AS {sql}")
        folded = int(con.execute("SELECT count(*) FROM tail_spans").fetchall()[0][0])
        for statement in _WRITE_FOLD:
            if statement in _SKIP_WITHOUT and not found[_SKIP_WITHOUT[statement]]:
                continue
            con.execute(statement)
    finally:
        for kind, name in reversed(names):
            con.execute(f"DROP {kind} IF EXISTS temp.{name}")
    return folded


def _build(con: duckdb.DuckDBPyConnection) -> int:
    """The first fold of a store (its kept tables empty): everything, by plain inserts."""
    con.execute(f"CREATE TEMP TABLE new_spans AS {_TAIL_SPANS}")
    con.execute(f"CREATE TEMP TABLE new_scores AS {_TAIL_SCORES}")
    try:
        con.execute(f"INSERT INTO run_trace_parts ({_TRACE_COLUMNS}, implicit_run_id) "
                    f"SELECT *, {p.implicit_run_id()} FROM ({p.trace_batch('new_spans', 'new_scores')})")
        con.execute(f"INSERT INTO run_attempt_parts ({_ATTEMPT_COLUMNS}) {p.attempt_batch('new_spans')}")
        con.execute(f"INSERT INTO kept_runs {runs_from_parts()}")
        con.execute("INSERT INTO kept_sessions " + sessions_select("kept_runs", run_ids=False))
        return int(con.execute("SELECT count(*) FROM new_spans").fetchall()[0][0])
    finally:
        con.execute("DROP TABLE new_spans")
        con.execute("DROP TABLE new_scores")


# --- the schema -----------------------------------------------------------------------------------------

# No kept table has a key or an index: the fold finds what it replaces by hash joins with the tail. The indexes
# the kept runs and sessions had cost 1.9 µs of a fold's 25 µs a span when every span is a run (their upkeep at
# the commit), and saved 12 ms of a 67 ms lookup of one run among a million (docs/performance.md).
_CREATE_KEPT = (
    p.create_table("run_trace_parts", p.TRACE_KEYS, p.TRACE_PARTS, ", prior_run_id VARCHAR, implicit_run_id VARCHAR"),
    p.create_table("run_attempt_parts", p.ATTEMPT_KEYS, p.ATTEMPT_PARTS),
    f"CREATE TABLE kept_runs AS SELECT * FROM ({runs_from_parts()}) LIMIT 0",
    # without the runs of each session (sessions_view.py): the view joins them on from the runs
    f"CREATE TABLE kept_sessions AS SELECT * FROM ({sessions_select('kept_runs', run_ids=False)}) LIMIT 0",
    # -1: nothing folded yet; the store's first fold builds everything (``_build``).
    "CREATE TABLE runs_fold (watermark BIGINT NOT NULL)",
    "INSERT INTO runs_fold VALUES (-1)",
)

# Migration 3: the commit stamp (rows stored before it: 0) and the kept tables (filled by the first fold,
# at the store's next open); the views over them come with the newest migration running REBUILD (schema.py).
MIGRATION: tuple[str, ...] = (
    "ALTER TABLE spans ADD COLUMN commit_seq BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE scores ADD COLUMN commit_seq BIGINT NOT NULL DEFAULT 0",
    *_CREATE_KEPT,
    "DROP VIEW IF EXISTS sessions",
    "DROP VIEW IF EXISTS runs",
)

# Everything kept, made again from the spans and scores by this code's definitions at the next fold: for stores
# filled by bulk SQL (the query benchmark's), compaction, and the migrations that change what makes a run (6 and
# 7: a store they upgrade is folded whole at that open, about 3 minutes for 10 million spans).
REBUILD: tuple[str, ...] = (
    *(f"DROP VIEW IF EXISTS {view}" for view in ("sessions", "runs")),
    *(f"DROP TABLE IF EXISTS {table}" for table in (
        "kept_sessions", "kept_runs", "run_attempt_parts", "run_trace_parts", "runs_fold")),
    *_CREATE_KEPT,
    *views(-1),
)
