"""The kept runs: tables folded from the spans off the ack path, and the views that answer ``runs`` and
``sessions`` from them merged with the spans not folded yet.

Every commit stamps its spans and scores with ``commit_seq`` (store.py), one number per commit, rising.
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

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from lousho.observe import runs_parts as p
from lousho.observe.runs_view import RUN_AGGREGATE
from lousho.observe.sessions_view import sessions_select

_TRACE_COLUMNS = p.names(p.TRACE_KEYS, p.TRACE_PARTS)
_ATTEMPT_COLUMNS = p.names(p.ATTEMPT_KEYS, p.ATTEMPT_PARTS)
_WATERMARK = "(SELECT watermark FROM runs_fold)"
# The rows above the watermark, each stored span once.
_TAIL_SPANS = (f"SELECT DISTINCT ON (span_key) {', '.join(p.SPAN_INPUTS)} FROM spans "
               f"WHERE commit_seq > {_WATERMARK}")
_TAIL_SCORES = (f"SELECT DISTINCT ON (span_key, seq) trace_id, passed FROM scores "
                f"WHERE commit_seq > {_WATERMARK}")


def _implicit_attempts(trace_parts: str, runs: str | None) -> str:
    """The view's ``attempt`` rows of runs without a lousho run id, from the trace parts in
    ``trace_parts`` whose implicit run is among ``runs`` (SQL, a list or subquery; None: all)."""
    firsts = ", ".join(f"arg_min(h.{name}, h.start_ns) AS {name}" for name, _, _ in p.HEAD_FIELDS[3:8])
    return f"""
SELECT run_id, trace_id, min(h.start_ns) AS start_ns, {firsts},
    NULL::VARCHAR AS run_kind, NULL::VARCHAR AS healed_from, arg_min(h.probe, h.start_ns) AS probe,
    arg_min(h.traffic_arm, h.start_ns) AS traffic_arm, arg_min(h.status_code, h.start_ns) AS status_code,
    arg_min(h.status_message, h.start_ns) AS status_message, arg_min(h.error_type, h.start_ns) AS error_type,
    NULL::VARCHAR AS input, NULL::VARCHAR AS output, true AS implicit
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
             "false AS implicit")
# The view's per_trace columns.
_PER_TRACE = ("trace_id, end_ns, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, "
              "reasoning_tokens, cost_usd, reported_costs, priced_costs, model_calls, tool_calls, any_agent, "
              "first_model, first_provider, first_conversation_id, skills, any_error, first_input_text, "
              "last_output_text, last_error_type, last_error_message")


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
), {RUN_AGGREGATE}"""


# --- the views: kept rows merged with the tail -------------------------------------------------------

# Each CTE used more than once is MATERIALIZED: inlined, DuckDB would plan (and run) it once per use, and
# planning this SQL is most of what a query over an empty tail costs.
_TAIL_CTES = f"""
tail_spans AS MATERIALIZED ({_TAIL_SPANS}),
tail_scores AS ({_TAIL_SCORES}),
tail_trace AS ({p.trace_batch('tail_spans', 'tail_scores')}),
tail_attempt AS ({p.attempt_batch('tail_spans')}),
merged_trace AS MATERIALIZED (
    SELECT *, {p.implicit_run_id()} AS implicit_run_id FROM (
        SELECT n.trace_id, {p.merged_select(p.TRACE_PARTS, 'o', 'n')}, o.implicit_run_id AS prior_run_id
        FROM tail_trace n LEFT JOIN run_trace_parts o ON o.trace_id = n.trace_id)
),
touched_runs AS MATERIALIZED (
    SELECT DISTINCT run_id FROM (
        SELECT unnest([prior_run_id, implicit_run_id]) AS run_id FROM merged_trace
        UNION ALL SELECT unnest(run_ids) FROM merged_trace
    ) WHERE run_id IS NOT NULL
),
merged_attempt AS MATERIALIZED (
    SELECT n.run_id, n.trace_id, {p.merged_select(p.ATTEMPT_PARTS, 'o', 'n')}
    FROM tail_attempt n LEFT JOIN run_attempt_parts o ON o.run_id = n.run_id AND o.trace_id = n.trace_id
),
attempt_parts AS MATERIALIZED (
    SELECT k.* FROM (SELECT {_ATTEMPT_COLUMNS} FROM run_attempt_parts
                     WHERE run_id IN (SELECT run_id FROM touched_runs)) k
    ANTI JOIN merged_attempt m ON m.run_id = k.run_id AND m.trace_id = k.trace_id
    UNION ALL SELECT {_ATTEMPT_COLUMNS} FROM merged_attempt
),
trace_parts AS MATERIALIZED (
    SELECT k.* FROM (SELECT {_TRACE_COLUMNS}, implicit_run_id FROM run_trace_parts
                     WHERE implicit_run_id IN (SELECT run_id FROM touched_runs)
                        OR trace_id IN (SELECT trace_id FROM attempt_parts)) k
    ANTI JOIN merged_trace m ON m.trace_id = k.trace_id
    UNION ALL SELECT {_TRACE_COLUMNS}, implicit_run_id FROM merged_trace
)"""

# The runs the tail touches (``touched_runs``: including runs it makes disappear), their rows recomputed
# (``unfolded``), and every run: the kept rows of the others with those (``merged_runs``).
_RUNS_CTES = f"""{_TAIL_CTES},
unfolded AS MATERIALIZED (SELECT * FROM ({runs_from_parts("(SELECT run_id FROM touched_runs)",
                                                           trace_parts="trace_parts", attempt_parts="attempt_parts")})),
merged_runs AS (
    SELECT k.* FROM kept_runs k ANTI JOIN touched_runs t ON t.run_id = k.run_id
    UNION ALL SELECT * FROM unfolded
)"""
RUNS_VIEW = f"CREATE OR REPLACE VIEW runs AS WITH {_RUNS_CTES} SELECT * FROM merged_runs"
SESSIONS_VIEW = f"""CREATE OR REPLACE VIEW sessions AS
WITH {_RUNS_CTES},
touched AS MATERIALIZED (
    SELECT conversation_id FROM kept_runs WHERE run_id IN (SELECT run_id FROM touched_runs)
    UNION SELECT conversation_id FROM unfolded
)
SELECT k.* FROM kept_sessions k ANTI JOIN touched t ON t.conversation_id = k.session_id
UNION ALL {sessions_select('merged_runs', 'conversation_id IN (SELECT conversation_id FROM touched)')}"""

# --- the fold ------------------------------------------------------------------------------------------

# What a fold says about each trace it touched: the runs it was part of before (``prior_run_id``, an
# implicit run it may no longer be) and is part of now.
_TRACE_RETURNING = "RETURNING trace_id, prior_run_id, implicit_run_id, run_ids"


def _merged(name: str) -> str:
    """The SQL of part ``name``'s value after a DO UPDATE merge (SET clauses see the old values)."""
    part = next(x for x in p.TRACE_PARTS if x.name == name)
    return dict(p.merges(part, "run_trace_parts", "excluded"))[name]


_MERGED_IMPLICIT_RUN_ID = (
    f"CASE WHEN NOT coalesce({_merged('has_run_id')}, false) AND {_merged('heads')} IS NOT NULL "
    f"THEN coalesce(CASE WHEN {_merged('inv_n')} > 0 THEN {_merged('inv_call_id')} "
    f"ELSE {_merged('root_call_id')} END, run_trace_parts.trace_id) END")
_FOLD_TRACE_BATCH = p.trace_batch("new_spans", "new_scores")
_INSERT_NEW_TRACES = (f"INSERT INTO run_trace_parts ({_TRACE_COLUMNS}, implicit_run_id) "
                      f"SELECT *, {p.implicit_run_id()} FROM ({_FOLD_TRACE_BATCH}) "
                      f"ON CONFLICT DO NOTHING {_TRACE_RETURNING}")
# Only traces already kept: DuckDB's DO UPDATE costs several times a plain insert, even for new keys.
_MERGE_KNOWN_TRACES = (f"INSERT INTO run_trace_parts ({_TRACE_COLUMNS}) "
                       f"SELECT * FROM ({_FOLD_TRACE_BATCH}) "
                       "WHERE trace_id NOT IN (SELECT trace_id FROM new_traces) "
                       f"ON CONFLICT DO UPDATE SET {p.merged_set(p.TRACE_PARTS, 'run_trace_parts')}, "
                       f"prior_run_id = run_trace_parts.implicit_run_id, implicit_run_id = {_MERGED_IMPLICIT_RUN_ID} "
                       f"{_TRACE_RETURNING}")
_FOLD_ATTEMPT_BATCH = p.attempt_batch("new_spans")
_INSERT_NEW_ATTEMPTS = (f"INSERT INTO run_attempt_parts ({_ATTEMPT_COLUMNS}) {_FOLD_ATTEMPT_BATCH} "
                        "ON CONFLICT DO NOTHING RETURNING run_id, trace_id")
_MERGE_KNOWN_ATTEMPTS = (
    f"INSERT INTO run_attempt_parts ({_ATTEMPT_COLUMNS}) SELECT * FROM ({_FOLD_ATTEMPT_BATCH}) "
    "WHERE (run_id, trace_id) NOT IN (SELECT (run_id, trace_id) FROM new_attempts) "
    f"ON CONFLICT DO UPDATE SET {p.merged_set(p.ATTEMPT_PARTS, 'run_attempt_parts')}")
_TOUCHED_RUNS = """
SELECT DISTINCT run_id FROM (
    SELECT unnest([prior_run_id, implicit_run_id]) AS run_id FROM touched_traces
    UNION ALL
    SELECT unnest(run_ids) FROM touched_traces
) WHERE run_id IS NOT NULL
"""
_NO_SCORES = pa.schema([("trace_id", pa.string()), ("passed", pa.bool_())])


def _sql_list(values: list[str]) -> str:
    """Values as a list of SQL string literals: an ``IN`` over it is an index lookup, where an ``IN``
    over a relation scans the whole table."""
    if not values:
        return "(NULL)"
    return "(" + ", ".join("'" + value.replace("'", "''") + "'" for value in values) + ")"


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
        if watermark < 0:
            folded = _build(con)
        else:
            spans = con.sql(_TAIL_SPANS).to_arrow_table()
            scores = con.sql(_TAIL_SCORES).to_arrow_table()
            _refresh(con, spans, scores)
            folded = spans.num_rows
        # Rows above ``high`` committed after this transaction began: the next fold takes them.
        con.execute("UPDATE runs_fold SET watermark = ?", [high])
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # deliberate: the fold's own error is the one to report
        raise
    return folded


def _refresh(con: duckdb.DuckDBPyConnection, spans: pa.Table, scores: pa.Table) -> None:
    """Merge ``spans`` and ``scores`` into the parts, then recompute the runs and sessions they touched."""
    con.register("new_spans", spans)
    con.register("new_scores", scores)
    try:
        touched = [con.sql(_INSERT_NEW_TRACES).to_arrow_table()]
        traces = pc.count_distinct(pa.chunked_array(spans["trace_id"].chunks + scores["trace_id"].chunks,
                                                    type=pa.string())).as_py()
        if touched[0].num_rows < traces:
            con.register("new_traces", touched[0])
            touched.append(con.sql(_MERGE_KNOWN_TRACES).to_arrow_table())
        attempts = spans.select(["run_id", "trace_id"]).filter(pc.is_valid(spans["run_id"]))
        if attempts.num_rows:
            new_attempts = con.sql(_INSERT_NEW_ATTEMPTS).to_arrow_table()
            if new_attempts.num_rows < attempts.group_by(["run_id", "trace_id"]).aggregate([]).num_rows:
                con.register("new_attempts", new_attempts)
                con.execute(_MERGE_KNOWN_ATTEMPTS)
        touched_traces = pa.concat_tables(touched, promote_options="permissive")
        con.register("touched_traces", touched_traces)
        _recompute(con, touched_traces)
    finally:
        for name in ("new_spans", "new_scores", "new_traces", "new_attempts", "touched_traces"):
            con.unregister(name)


def _recompute(con: duckdb.DuckDBPyConnection, touched_traces: pa.Table) -> None:
    runs = _sql_list(con.sql(_TOUCHED_RUNS).to_arrow_table()["run_id"].to_pylist())
    # Only the kinds of run these traces make: each branch of the recompute costs a few ms even empty.
    explicit = touched_traces["run_ids"].null_count < touched_traces.num_rows
    implicit = (touched_traces["implicit_run_id"].null_count < touched_traces.num_rows
                or touched_traces["prior_run_id"].null_count < touched_traces.num_rows)
    traces = con.sql(f"SELECT trace_id FROM run_attempt_parts WHERE run_id IN {runs} UNION "
                     f"SELECT trace_id FROM run_trace_parts WHERE implicit_run_id IN {runs}").to_arrow_table()
    removed = con.sql(f"DELETE FROM kept_runs WHERE run_id IN {runs} RETURNING conversation_id").to_arrow_table()
    added = []
    if explicit or implicit:
        query = runs_from_parts(runs, _sql_list(traces["trace_id"].to_pylist()), explicit=explicit, implicit=implicit)
        added.append(con.sql(f"INSERT INTO kept_runs {query} RETURNING conversation_id").to_arrow_table())
    sessions = pc.unique(pa.concat_tables([removed, *added])["conversation_id"]).drop_null().to_pylist()
    if sessions:
        listed = _sql_list(sessions)
        con.execute(f"DELETE FROM kept_sessions WHERE session_id IN {listed}")
        con.execute("INSERT INTO kept_sessions " + sessions_select("kept_runs", f"conversation_id IN {listed}"))


def _build(con: duckdb.DuckDBPyConnection) -> int:
    """The first fold of a store (its kept tables empty): everything, by plain inserts."""
    con.execute(f"CREATE TEMP TABLE new_spans AS {_TAIL_SPANS}")
    con.execute(f"CREATE TEMP TABLE new_scores AS {_TAIL_SCORES}")
    try:
        con.execute(f"INSERT INTO run_trace_parts ({_TRACE_COLUMNS}, implicit_run_id) "
                    f"SELECT *, {p.implicit_run_id()} FROM ({_FOLD_TRACE_BATCH})")
        con.execute(f"INSERT INTO run_attempt_parts ({_ATTEMPT_COLUMNS}) {_FOLD_ATTEMPT_BATCH}")
        con.execute(f"INSERT INTO kept_runs {runs_from_parts()}")
        con.execute("INSERT INTO kept_sessions " + sessions_select("kept_runs"))
        return int(con.execute("SELECT count(*) FROM new_spans").fetchall()[0][0])
    finally:
        con.execute("DROP TABLE new_spans")
        con.execute("DROP TABLE new_scores")


# --- the schema -----------------------------------------------------------------------------------------

_CREATE_KEPT = (
    p.create_table("run_trace_parts", p.TRACE_KEYS, p.TRACE_PARTS, ", prior_run_id VARCHAR, implicit_run_id VARCHAR"),
    p.create_table("run_attempt_parts", p.ATTEMPT_KEYS, p.ATTEMPT_PARTS),
    # What a fold looks up by value (the _sql_list lists): each an index, not a scan.
    "CREATE INDEX run_trace_parts_implicit_run_id ON run_trace_parts (implicit_run_id)",
    "CREATE INDEX run_attempt_parts_run_id ON run_attempt_parts (run_id)",
    f"CREATE TABLE kept_runs AS SELECT * FROM ({runs_from_parts()}) LIMIT 0",
    f"CREATE TABLE kept_sessions AS SELECT * FROM ({sessions_select('kept_runs')}) LIMIT 0",
    "CREATE INDEX kept_runs_run_id ON kept_runs (run_id)",
    "CREATE INDEX kept_sessions_session_id ON kept_sessions (session_id)",
    # -1: nothing folded yet; the store's first fold builds everything (``_build``).
    "CREATE TABLE runs_fold (watermark BIGINT NOT NULL)",
    "INSERT INTO runs_fold VALUES (-1)",
)

# Migration 3: the commit stamp (rows stored before it: 0), the kept tables (filled by the first fold,
# at the store's next open) and the views over them in place of the views over the spans.
MIGRATION: tuple[str, ...] = (
    "ALTER TABLE spans ADD COLUMN commit_seq BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE scores ADD COLUMN commit_seq BIGINT NOT NULL DEFAULT 0",
    *_CREATE_KEPT,
    "DROP VIEW sessions",
    "DROP VIEW runs",
    RUNS_VIEW,
    SESSIONS_VIEW,
)

# Everything kept, made again from the spans and scores by this code's definitions at the next fold:
# for stores filled by bulk SQL (the query benchmark's), never for the daemon's.
REBUILD: tuple[str, ...] = (
    *(f"DROP VIEW IF EXISTS {view}" for view in ("sessions", "runs")),
    *(f"DROP TABLE IF EXISTS {table}" for table in (
        "kept_sessions", "kept_runs", "run_attempt_parts", "run_trace_parts", "runs_fold")),
    *_CREATE_KEPT,
    RUNS_VIEW,
    SESSIONS_VIEW,
)
