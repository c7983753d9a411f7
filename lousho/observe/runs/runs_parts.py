"""Partial aggregates of a run's spans that merge: what the kept ``runs`` table is folded from.

A run's row depends on every span of its traces, and those arrive in any order, in any number of
commits (a resumed run is a new trace, possibly hours later). The store keeps, per trace and per
(run id, trace), aggregates that two batches of spans can be merged into without the spans:

* per trace (``TRACE_PARTS``): what the ``per_trace`` and ``verdict`` steps of the runs view
  (runs_view.py) compute, plus the trace's candidate roots for a run with no lousho run id (its
  ``invoke_agent`` and root spans, kept whole: a trace has a few) and the run ids its spans carry;
* per (run id, trace) (``ATTEMPT_PARTS``): the view's ``attempt`` step for spans carrying a run id.

Every aggregate merges: min and max, sums and counts, "or" and "and", distinct lists, and
"first"/"last" values kept with the time that chose them (``arg_min`` by start, ``arg_max`` by end,
skipping NULLs as DuckDB's ``arg_min`` does). This module only writes SQL; runs_table.py runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lousho.observe.runs.runs_view import AGENT_HINT, MODEL_OPERATIONS, MODEL_SPAN


@dataclass(frozen=True)
class Part:
    """One partial aggregate: ``kind`` says how it is computed over spans and how two of them merge."""

    name: str
    kind: str  # min, max, sum, count, or, and, any, set, list, first (by start_ns), last (by end_ns)
    expr: str
    where: str = "true"
    sql_type: str = "VARCHAR"


# What a candidate root of a trace without a run id keeps, in the view's ``attempt`` columns.
HEAD_FIELDS = (
    ("start_ns", "start_ns", "BIGINT"),  # first: a list of heads sorts by it
    ("inv", "operation = 'invoke_agent'", "BOOLEAN"),
    ("call_id", "call_id", "VARCHAR"),
    ("agent_name", "agent_name", "VARCHAR"),
    ("service_name", "service_name", "VARCHAR"),
    ("harness_revision", "harness_revision", "VARCHAR"),
    ("case_id", "case_id", "VARCHAR"),
    ("conversation_id", "conversation_id", "VARCHAR"),
    ("probe", "probe", "BOOLEAN"),
    ("traffic_arm", "traffic_arm", "VARCHAR"),
    ("status_code", "status_code", "VARCHAR"),
    ("status_message", "status_message", "VARCHAR"),
    ("error_type", "error_type", "VARCHAR"),
    ("agent_hint", AGENT_HINT, "VARCHAR"),
)
# The candidate roots of a trace with no run id: its invoke_agent spans if it has any, else its roots.
_CANDIDATE_HEADS = "run_id IS NULL AND (operation = 'invoke_agent' OR parent_span_id IS NULL)"
_HEAD_PARTS: tuple[Part, ...] = (
    Part("inv_n", "count", "*", "operation = 'invoke_agent'", "BIGINT"),
    # The implicit run's id without opening the list (list lambdas cost more than these two aggregates).
    Part("inv_call_id", "first", "call_id", "operation = 'invoke_agent'"),
    Part("root_call_id", "first", "call_id"),
    Part("heads", "list", "struct_pack(" + ", ".join(f"{name} := {expr}" for name, expr, _ in HEAD_FIELDS) + ")",
         sql_type="STRUCT(" + ", ".join(f"{name} {kind}" for name, _, kind in HEAD_FIELDS) + ")[]"),
)
_SPAN_PARTS: tuple[Part, ...] = (
    Part("end_ns", "max", "end_ns", sql_type="BIGINT"),
    *(Part(name, "sum", name, sql_type="BIGINT") for name in (
        "input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens", "reasoning_tokens")),
    Part("cost_usd", "sum", "cost_usd", sql_type="DOUBLE"),
    Part("reported_costs", "count", "*", "cost_source = 'reported'", "BIGINT"),
    Part("priced_costs", "count", "*", "cost_source = 'price-table'", "BIGINT"),
    # The model spans with their parents: a span nested in another is not a second request (runs_view.model_calls).
    Part("model_spans", "set", MODEL_SPAN, MODEL_OPERATIONS, "STRUCT(id VARCHAR, parent VARCHAR)[]"),
    Part("tool_calls", "count", "*", "operation = 'execute_tool'", "BIGINT"),
    Part("first_agent", "first", "agent_name"),
    Part("first_model", "first", "coalesce(request_model, response_model)"),
    Part("first_provider", "first", "provider"),
    Part("first_conversation_id", "first", "conversation_id"),
    Part("skills", "set", "skill_name", sql_type="VARCHAR[]"),
    # An agent span that ended in ERROR fails the run even under a root that ended OK (runs_view.RUN_AGGREGATE).
    Part("agent_error", "or", "status_code = 'ERROR' AND operation = 'invoke_agent' AND agent_name IS NOT NULL",
         sql_type="BOOLEAN"),
    Part("first_input_text", "first", "input_text"),
    Part("last_output_text", "last", "output_text"),
    Part("last_error_type", "last", "error_type", "status_code = 'ERROR'"),
    Part("last_error_message", "last", "status_message", "status_code = 'ERROR'"),
    Part("error_spans", "count", "*", "status_code = 'ERROR'", "BIGINT"),
    # The revision derived from what the agent sent (fingerprint.py): a model call's first, else any span's. A
    # model call by its operation, not by a model on the span: the AI SDK's ai.generateText span names the model
    # too, but carries only the system prompt (no tools), and it starts in the same millisecond as its first call.
    Part("model_print", "first", "fingerprint", MODEL_OPERATIONS),
    Part("any_print", "first", "fingerprint"),
    Part("version_revision", "first", "harness_revision", "revision_source = 'version'"),
    Part("has_run_id", "or", "run_id IS NOT NULL", sql_type="BOOLEAN"),
    Part("run_ids", "set", "run_id", sql_type="VARCHAR[]"),  # the runs this trace is an attempt of
)
# The verdict of a trace: every score with a pass/fail passed.
VERDICT_PART = Part("passed", "and", "passed", "passed IS NOT NULL", "BOOLEAN")
TRACE_PARTS = (*_SPAN_PARTS, *_HEAD_PARTS, VERDICT_PART)

ATTEMPT_PARTS: tuple[Part, ...] = (
    Part("start_ns", "min", "start_ns", sql_type="BIGINT"),
    *(Part(name, "first", name, sql_type="BOOLEAN" if name == "probe" else "VARCHAR") for name in (
        "agent_name", "service_name", "harness_revision", "case_id", "conversation_id", "run_kind", "healed_from",
        "probe", "traffic_arm", "status_code", "status_message", "error_type", "input", "output")),
)

# The span columns the parts read.
SPAN_INPUTS = ("trace_id", "span_id", "name", "parent_span_id", "start_ns", "end_ns", "status_code", "status_message",
               "service_name", "operation", "agent_name", "provider", "request_model", "response_model",
               "conversation_id", "input_tokens", "output_tokens", "cost_usd", "error_type", "run_id", "run_kind",
               "healed_from", "harness_revision", "case_id", "probe", "traffic_arm", "input", "output", "call_id",
               "cache_read_tokens", "cache_creation_tokens", "reasoning_tokens", "cost_source", "skill_name",
               "input_text", "output_text", "fingerprint", "revision_source")
TRACE_KEYS = ["trace_id"]
ATTEMPT_KEYS = ["run_id", "trace_id"]


def columns(part: Part) -> list[tuple[str, str]]:
    """The stored columns of a part: a "first"/"last" value keeps the time that chose it."""
    if part.kind in ("first", "last"):
        return [(part.name, part.sql_type), (f"{part.name}__ns", "BIGINT")]
    return [(part.name, part.sql_type)]


def names(keys: list[str], parts: tuple[Part, ...]) -> str:
    return ", ".join([*keys, *(name for part in parts for name, _ in columns(part))])


def create_table(table: str, keys: list[str], parts: tuple[Part, ...], extra: str = "") -> str:
    cols = [f"{key} VARCHAR NOT NULL" for key in keys]
    cols += [f"{name} {kind}" for part in parts for name, kind in columns(part)]
    return f"CREATE TABLE {table} ({', '.join(cols)}{extra})"


def _when(condition: str, expr: str) -> str:
    return expr if condition == "true" else f"CASE WHEN {condition} THEN {expr} END"


def _aggregates(part: Part) -> list[str]:
    # Conditions go inside the aggregate (a NULL is skipped) rather than in FILTER clauses: with some
    # fifty aggregates, FILTER made the batch's aggregation twenty times slower.
    match part.kind:
        case "min" | "max" | "sum":
            return [f"{part.kind}({_when(part.where, part.expr)})"]
        case "count":
            return [f"count({_when(part.where, '1')})"]
        case "or":
            return [f"bool_or({_when(part.where, part.expr)})"]
        case "and":
            return [f"bool_and({_when(part.where, part.expr)})"]
        case "any":
            return [f"any_value({_when(part.where, part.expr)})"]
        case "list":
            return [f"list({_when(part.where, part.expr)})"]
        case "set":
            # list_distinct drops NULLs; no value at all is NULL, as the view's filtered list(DISTINCT) is.
            return [f"nullif(list_distinct(list({_when(part.where, part.expr)})), [])"]
        case "first" | "last":
            fn, key = ("min", "start_ns") if part.kind == "first" else ("max", "end_ns")
            chosen = _when(f"({part.expr}) IS NOT NULL AND {part.where}", key)
            return [f"arg_{fn}({part.expr}, {chosen})", f"{fn}({chosen})"]
    raise ValueError(f"unknown part kind {part.kind!r}")


def batch(keys: list[str], parts: tuple[Part, ...], source: str, where: str = "true") -> str:
    """The partial aggregates of the rows of ``source``, one row per key."""
    aggregates = [*keys, *(f"{agg} AS {name}" for part in parts
                           for agg, (name, _) in zip(_aggregates(part), columns(part), strict=True))]
    return f"SELECT {', '.join(aggregates)} FROM {source} WHERE {where} GROUP BY ALL"


def _one_row(part: Part) -> list[str]:
    """What ``_aggregates`` gives over a single row, without aggregating (the keys, ``start_ns`` and ``end_ns``,
    are never NULL)."""
    value = _when(part.where, part.expr)
    match part.kind:
        case "min" | "max" | "sum" | "or" | "and" | "any":
            return [value]
        case "count":
            return ["1::BIGINT" if part.where == "true" else f"(CASE WHEN {part.where} THEN 1 ELSE 0 END)::BIGINT"]
        case "list":
            return [f"[{value}]"]
        case "set":
            return [f"nullif(list_distinct([{value}]), [])"]
        case "first" | "last":
            key = "start_ns" if part.kind == "first" else "end_ns"
            return [value, _when(f"({part.expr}) IS NOT NULL AND {part.where}", key)]
    raise ValueError(f"unknown part kind {part.kind!r}")


def batch_one_apart(keys: list[str], parts: tuple[Part, ...], source: str, where: str = "true") -> str:
    """``batch``, with the keys that have a single row taken as they are: the aggregates of one row are its
    values. It pays when most keys have one row: with a run on every span it took a third to a half off the fold's
    aggregations of the tail; over traces of several spans it cost them a quarter more (runs_table.ONE_APART_SHARE)."""
    key_list = ", ".join(keys)
    ones = [*keys, *(f"{expr} AS {name}" for part in parts
                     for expr, (name, _) in zip(_one_row(part), columns(part), strict=True))]
    several = f"(SELECT {key_list} FROM {source} WHERE {where} GROUP BY ALL HAVING count(*) > 1)"
    return (f"SELECT {', '.join(ones)} FROM {source} ANTI JOIN {several} USING ({key_list}) WHERE {where} "
            f"UNION ALL ({batch(keys, parts, f'{source} SEMI JOIN {several} USING ({key_list})', where)})")


def _nullable(old: str, new: str, both: str) -> str:
    return f"CASE WHEN {old} IS NULL THEN {new} WHEN {new} IS NULL THEN {old} ELSE {both} END"


def merges(part: Part, old_table: str, new_table: str) -> list[tuple[str, str]]:
    """(column, SQL) pairs merging a stored row (``old_table``) with an incoming one (``new_table``);
    either may be all NULL (no such row)."""
    old, new = f"{old_table}.{part.name}", f"{new_table}.{part.name}"
    match part.kind:
        case "min":
            return [(part.name, f"least({old}, {new})")]
        case "max":
            return [(part.name, f"greatest({old}, {new})")]
        case "count":
            return [(part.name, f"coalesce({old}, 0) + coalesce({new}, 0)")]
        case "sum":
            return [(part.name, _nullable(old, new, f"{old} + {new}"))]
        case "or":
            return [(part.name, _nullable(old, new, f"{old} OR {new}"))]
        case "and":
            return [(part.name, _nullable(old, new, f"{old} AND {new}"))]
        case "any":
            return [(part.name, f"coalesce({old}, {new})")]
        case "set":
            return [(part.name, _nullable(old, new, f"list_distinct(list_concat({old}, {new}))"))]
        case "list":
            return [(part.name, _nullable(old, new, f"list_concat({old}, {new})"))]
        case "first" | "last":
            # Ties keep the stored value: the view's arg_min picks any of equal keys too.
            better, pick = ("<", "least") if part.kind == "first" else (">", "greatest")
            old_ns, new_ns = f"{old}__ns", f"{new}__ns"
            wins = f"{new_ns} IS NOT NULL AND ({old_ns} IS NULL OR {new_ns} {better} {old_ns})"
            return [(part.name, f"CASE WHEN {wins} THEN {new} ELSE {old} END"),
                    (f"{part.name}__ns", f"{pick}({old_ns}, {new_ns})")]
    raise ValueError(f"unknown part kind {part.kind!r}")


def merged_select(parts: tuple[Part, ...], old_table: str, new_table: str) -> str:
    """The merged columns as a SELECT list (``expr AS column``)."""
    return ", ".join(f"{sql} AS {name}" for part in parts for name, sql in merges(part, old_table, new_table))


def alone_select(parts: tuple[Part, ...], new_table: str) -> str:
    """What ``merged_select`` gives when there is no stored row, without the merge: the incoming row's columns
    (a count no row had is 0, as the merge makes it)."""
    return ", ".join(f"coalesce({new_table}.{name}, 0) AS {name}" if part.kind == "count" else f"{new_table}.{name}"
                     for part in parts for name, _ in columns(part))


def implicit_run_id(table: str = "") -> str:
    """The id of the run a trace is by itself (no span with a run id): NULL when it is none."""
    t = f"{table}." if table else ""
    call_id = f"CASE WHEN {t}inv_n > 0 THEN {t}inv_call_id ELSE {t}root_call_id END"
    return (f"CASE WHEN NOT coalesce({t}has_run_id, false) AND {t}heads IS NOT NULL "
            f"THEN coalesce({call_id}, {t}trace_id) END")


def trace_batch(spans: str, scores: str | None, *, one_apart: bool = False) -> str:
    """Per trace: the partials of ``spans`` and the verdict of ``scores`` (None: there are none), in
    ``TRACE_PARTS`` order; ``one_apart``: the traces of one span taken as they are (``batch_one_apart``)."""
    span_parts = (batch_one_apart if one_apart else batch)(TRACE_KEYS, _SPAN_PARTS, spans)
    heads = (f"SELECT * FROM ({span_parts}) "
             f"LEFT JOIN ({batch(TRACE_KEYS, _HEAD_PARTS, spans, _CANDIDATE_HEADS)}) USING (trace_id)")
    if scores is None:
        return f"SELECT *, NULL::BOOLEAN AS passed FROM ({heads})"
    return (f"SELECT {names(TRACE_KEYS, TRACE_PARTS)} FROM ({heads}) "
            f"FULL JOIN ({batch(TRACE_KEYS, (VERDICT_PART,), scores, VERDICT_PART.where)}) USING (trace_id)")


def attempt_batch(spans: str, *, one_apart: bool = False) -> str:
    return (batch_one_apart if one_apart else batch)(ATTEMPT_KEYS, ATTEMPT_PARTS, spans, "run_id IS NOT NULL")
