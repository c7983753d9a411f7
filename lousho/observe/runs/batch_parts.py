"""The partial aggregates of committed spans, made from their Arrow tables in memory rather than read back.

runs_parts.py defines each part as SQL over stored spans. The fold (runs_table.py) would run that SQL over the
tail it reads back from the store, one row per span. Here the same parts come from the rows the loader committed,
as it decoded, refined (conventions.py fills columns the parts read) and de-duplicated them (a resent span must
not count twice): per trace (``TRACE_PARTS``, the verdict of the scores included) and per (run id, trace)
(``ATTEMPT_PARTS``), one row each, so the fold merges one row per run part with the kept ones (runs_fold.py holds
the commits' rows for it). Each group's rows are a segment of one sort (by group, then time): a sum, count or
extreme is a numpy ``reduceat``, a first or last value the first or last row of its segment that has one, taken
from its column only at the rows chosen; a load where every span is a trace and a run of its own needs neither
the sort nor the take.

What they equal: ``trace_batch`` and ``attempt_batch`` of runs_parts.py over the same rows, with two freedoms the
fold's merge already allows: a list or set may hold its values in another order, and where two spans tie for a
"first" or "last" value (the same start or end), either may be chosen (DuckDB's ``arg_min`` chooses any too).
tests/observe/test_batch_parts.py holds them equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lousho.observe.runs import runs_parts as p

_HEAD_TYPES = {"BIGINT": pa.int64(), "BOOLEAN": pa.bool_(), "VARCHAR": pa.string()}
_MODEL_SPAN_TYPE = pa.struct([("id", pa.string()), ("parent", pa.string())])
_HEAD_TYPE = pa.struct([(name, _HEAD_TYPES[kind]) for name, _, kind in p.HEAD_FIELDS])
_MODEL_OPERATIONS = ("chat", "text_completion", "generate_content")
_PREPARE_SUFFIX = "._prepare_chat_with_tools"
_AGENT_CLASS_RUN = r"^[A-Z][A-Za-z0-9_]*\.a?run$"


def _arrow_type(part: p.Part) -> pa.DataType:
    if part.name == "heads":
        return pa.list_(_HEAD_TYPE)
    if part.name == "model_spans":
        return pa.list_(_MODEL_SPAN_TYPE)
    if part.sql_type == "VARCHAR[]":
        return pa.list_(pa.string())
    return _HEAD_TYPES[part.sql_type] if part.sql_type in _HEAD_TYPES else {"DOUBLE": pa.float64()}[part.sql_type]


def _schema(keys: list[str], parts: tuple[p.Part, ...]) -> pa.Schema:
    fields = [pa.field(key, pa.string()) for key in keys]
    for part in parts:
        fields.append(pa.field(part.name, _arrow_type(part)))
        if part.kind in ("first", "last"):
            fields.append(pa.field(f"{part.name}__ns", pa.int64()))
    return pa.schema(fields)


# The score columns the parts read.
SCORE_INPUTS = ("trace_id", "passed")
TRACE_SCHEMA = _schema(p.TRACE_KEYS, p.TRACE_PARTS)
ATTEMPT_SCHEMA = _schema(p.ATTEMPT_KEYS, p.ATTEMPT_PARTS)


@dataclass(frozen=True)
class BatchParts:
    """One load's parts: ``trace`` (TRACE_SCHEMA) and ``attempt`` (ATTEMPT_SCHEMA), from ``spans`` spans and
    ``scores`` scores."""

    trace: pa.Table
    attempt: pa.Table
    spans: int
    scores: int


# --- the parts' expressions over a table of spans, as runs_parts.py writes them in SQL ----------------------


def _model_operation(t: pa.Table) -> pa.ChunkedArray:
    return pc.and_kleene(pc.is_in(t["operation"], pa.array(_MODEL_OPERATIONS)),
                         pc.invert(pc.ends_with(t["name"], _PREPARE_SUFFIX)))


def _agent_hint(t: pa.Table) -> pa.ChunkedArray:
    # AGENT_HINT: an agent span's name, else the class of a workflow's run ("FunctionAgent.run").
    agent = pc.equal(t["operation"], "invoke_agent")
    run = pc.match_substring_regex(t["name"], _AGENT_CLASS_RUN)
    cls = pc.list_element(pc.split_pattern(t["name"], ".", max_splits=1), 0)
    return pc.if_else(pc.fill_null(agent, False), t["name"],
                      pc.if_else(pc.fill_null(run, False), cls, pa.scalar(None, pa.string())))


def _span_inputs(t: pa.Table) -> dict[str, tuple[pa.ChunkedArray | pa.Array, pa.ChunkedArray | None]]:
    """Per span part of ``_SPAN_PARTS``: (its expression, its condition or None for "true")."""
    status_error = pc.equal(t["status_code"], "ERROR")
    model = _model_operation(t)
    return {
        "end_ns": (t["end_ns"], None),
        **{name: (t[name], None) for name in ("input_tokens", "output_tokens", "cache_read_tokens",
                                               "cache_creation_tokens", "reasoning_tokens", "cost_usd")},
        "reported_costs": (None, pc.equal(t["cost_source"], "reported")),
        "priced_costs": (None, pc.equal(t["cost_source"], "price-table")),
        "model_spans": (None, model),
        "tool_calls": (None, pc.equal(t["operation"], "execute_tool")),
        "first_agent": (t["agent_name"], None),
        "first_model": (pc.coalesce(t["request_model"], t["response_model"]), None),
        "first_provider": (t["provider"], None),
        "first_conversation_id": (t["conversation_id"], None),
        "skills": (t["skill_name"], None),
        "agent_error": (pc.and_kleene(pc.and_kleene(status_error, pc.equal(t["operation"], "invoke_agent")),
                                      pc.is_valid(t["agent_name"])), None),
        "first_input_text": (t["input_text"], None),
        "last_output_text": (t["output_text"], None),
        "last_error_type": (t["error_type"], status_error),
        "last_error_message": (t["status_message"], status_error),
        "error_spans": (None, status_error),
        "model_print": (t["fingerprint"], model),
        "any_print": (t["fingerprint"], None),
        "version_revision": (t["harness_revision"], pc.equal(t["revision_source"], "version")),
        "has_run_id": (pc.is_valid(t["run_id"]), None),
        "run_ids": (t["run_id"], None),
    }


def _head_inputs(t: pa.Table) -> dict:
    agent = pc.equal(t["operation"], "invoke_agent")
    return {"inv_n": (None, agent), "inv_call_id": (t["call_id"], agent), "root_call_id": (t["call_id"], None)}


def _attempt_inputs(t: pa.Table) -> dict:
    return {part.name: (t[part.name], None) for part in p.ATTEMPT_PARTS}


_SPAN_PARTS = tuple(part for part in p.TRACE_PARTS if part.name not in {"inv_n", "inv_call_id", "root_call_id",
                                                                          "heads", "passed"})


def _masked(value: pa.ChunkedArray | pa.Array, condition: pa.ChunkedArray | None) -> pa.ChunkedArray | pa.Array:
    """``CASE WHEN condition THEN value END``: NULL where the condition is false or NULL."""
    if condition is None:
        return value
    return pc.if_else(pc.fill_null(condition, False), value, pa.scalar(None, value.type))


def _group_ids(keys: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Each row's group (0..n-1) and the groups' keys, in the order they first appear."""
    encoded = pc.dictionary_encode(keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys)
    # A NULL key (a span with no run id) gets group 0: its rows are left out by the caller.
    return pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64), encoded.dictionary


def _numpy(array: pa.ChunkedArray | pa.Array, fill: object) -> tuple[np.ndarray, np.ndarray]:
    """The values (NULLs as ``fill``) and the validity of ``array``, as numpy arrays."""
    valid = pc.is_valid(array).to_numpy(zero_copy_only=False)
    return pc.fill_null(array, fill).to_numpy(zero_copy_only=False), valid


def _condition(condition: pa.ChunkedArray | None, rows: int) -> np.ndarray:
    """A SQL condition as a mask: NULL counts as false, as in ``CASE WHEN``."""
    if condition is None:
        return np.ones(rows, dtype=bool)
    return pc.fill_null(condition, False).to_numpy(zero_copy_only=False)


def _at(array: pa.ChunkedArray | pa.Array, rows: np.ndarray) -> pa.Array:
    """``array`` at ``rows`` (-1: NULL)."""
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    if len(rows) == len(array) and (rows == np.arange(len(rows))).all():
        return array
    return array.take(pa.array(rows, mask=rows < 0))


class _Groups:
    """Rows with group ids (0..``groups``-1), sorted by group then by a time: each group a segment, so a
    sum is a ``reduceat`` and a first value the first row of its segment with one."""

    def __init__(self, gids: np.ndarray, groups: int, key: np.ndarray, included: np.ndarray | None = None) -> None:
        """``gids`` and ``key`` per row of the table; ``included``: the rows taking part (None: all)."""
        self.groups = groups
        self.key = key
        # One row a group, in group order (every span its own trace and run, the usual shape of a run-per-span
        # load): each segment is its row, so no sort and no take.
        self.identity = included is None and len(gids) == groups and bool((gids == np.arange(groups)).all())
        if self.identity:
            self.order = np.arange(len(gids))
        elif included is None:
            self.order = np.lexsort((key, gids))
        else:
            rows = np.flatnonzero(included)
            self.order = rows[np.lexsort((key[rows], gids[rows]))]
        g = gids[self.order]
        self.starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, dtype=np.int64)
        self.present = g[self.starts]
        self._g = g

    def scatter(self, values: np.ndarray, valid: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
        """Per-segment ``values`` (NULL where not ``valid``) placed at their groups; a group without rows is NULL."""
        out = np.zeros(self.groups, dtype=values.dtype)
        mask = np.ones(self.groups, dtype=bool)
        out[self.present] = values
        mask[self.present] = ~valid
        return pa.array(out, type=arrow_type, mask=mask)

    def reduce(self, ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        if self.identity:
            return values
        return ufunc.reduceat(values[self.order], self.starts) if len(self.order) else values[:0]

    def chosen(self, mask: np.ndarray, last: bool) -> np.ndarray:
        """Per group, the row (-1: none) that is first (or last) in time among those where ``mask``."""
        rows = np.full(self.groups, -1, dtype=np.int64)
        if self.identity:
            rows[mask] = np.flatnonzero(mask)
            return rows
        positions = np.flatnonzero(mask[self.order])
        g = self._g[positions]
        edge = np.r_[g[1:] != g[:-1], True] if last else np.r_[True, g[1:] != g[:-1]]
        picked = positions[edge] if len(positions) else positions
        rows[self._g[picked]] = self.order[picked]
        return rows


def _part_columns(part: p.Part, value: pa.ChunkedArray | None, condition: pa.ChunkedArray | None,
                  groups: _Groups, rows: int) -> dict[str, pa.Array]:
    """The column(s) of ``part`` per group, as runs_parts.py's aggregate computes them."""
    when = _condition(condition, rows)
    name = part.name
    match part.kind:
        case "count":
            return {name: groups.scatter(groups.reduce(np.add, when.astype(np.int64)), np.ones(len(groups.present),
                                                                                             dtype=bool), pa.int64())}
        case "min" | "max" | "sum":
            arrow_type = _arrow_type(part)
            bound = {"min": np.iinfo(np.int64).max, "max": np.iinfo(np.int64).min, "sum": 0}[part.kind]
            values, valid = _numpy(value, 0.0 if pa.types.is_floating(arrow_type) else 0)
            valid &= when
            values = np.where(valid, values, bound)
            ufunc = {"min": np.minimum, "max": np.maximum, "sum": np.add}[part.kind]
            seen = groups.reduce(np.add, valid.astype(np.int64)) > 0
            return {name: groups.scatter(groups.reduce(ufunc, values), seen, arrow_type)}
        case "or" | "and":
            values, valid = _numpy(value, False)
            valid &= when
            seen = groups.reduce(np.add, valid.astype(np.int64)) > 0
            hits = valid & (values if part.kind == "or" else ~values)
            some = groups.reduce(np.add, hits.astype(np.int64)) > 0
            return {name: groups.scatter(some if part.kind == "or" else ~some, seen, pa.bool_())}
        case "first" | "last":
            mask = when & pc.is_valid(value).to_numpy(zero_copy_only=False)
            chosen = groups.chosen(mask, part.kind == "last")
            ns = groups.key[np.maximum(chosen, 0)] if len(groups.key) else np.zeros(groups.groups, dtype=np.int64)
            return {name: _at(value, chosen), f"{name}__ns": pa.array(ns, pa.int64(), mask=chosen < 0)}
    raise ValueError(f"no Arrow form for part kind {part.kind!r}")


def _distinct(values: pa.ChunkedArray, mask: np.ndarray, gids: np.ndarray, groups: int) -> pa.Array:
    """Per group, its distinct valid ``values`` where ``mask``, NULL for none (SQL's nullif(list_distinct(list(
    ...)), [])): a list of one where a group is one row."""
    mask = mask & pc.is_valid(values).to_numpy(zero_copy_only=False)
    table = pa.table({"gid": pa.array(gids[mask]), "v": values.filter(pa.array(mask))})
    result = table.group_by("gid", use_threads=False).aggregate([("v", "distinct")])
    return _placed(result["gid"].to_numpy(), result["v_distinct"].combine_chunks(), groups)


def _placed(present: np.ndarray, lists: pa.Array, groups: int) -> pa.Array:
    where = np.full(groups, -1, dtype=np.int64)
    where[present] = np.arange(len(present))
    if len(present) == groups and (present == np.arange(groups)).all():
        return lists
    return lists.take(pa.array(where, mask=where < 0))


# A table's (expression, condition) per part: None for a count's expression, or for a condition that is "true".
_Inputs = Callable[[pa.Table], dict[str, tuple[pa.ChunkedArray | None, pa.ChunkedArray | None]]]


def _parts_columns(parts: tuple[p.Part, ...], inputs_of: _Inputs, t: pa.Table, gids: np.ndarray, groups: int,
                   included: np.ndarray | None = None) -> dict[str, pa.Array]:
    """The columns of ``parts`` (none of them a list) over the rows of ``t`` (those ``included``) with group ids
    ``gids``; ``inputs_of`` gives each part's (expression, condition) over ``t``. The rows left out are never
    copied: values are taken from ``t`` only at the rows chosen."""
    inputs = inputs_of(t)
    rows = t.num_rows
    by_start = _Groups(gids, groups, t["start_ns"].to_numpy(), included)
    by_end = by_start
    if any(x.kind == "last" for x in parts):
        by_end = _Groups(gids, groups, t["end_ns"].to_numpy(), included)
    out: dict[str, pa.Array] = {}
    for part in parts:
        value, condition = inputs[part.name]
        if part.kind == "set":
            mask = _condition(condition, rows)
            out[part.name] = _distinct(value, mask if included is None else mask & included, gids, groups)
        else:
            out.update(_part_columns(part, value, condition, by_end if part.kind == "last" else by_start, rows))
    return out


def _listed(values: pa.Array, gids: np.ndarray, groups: int, included: np.ndarray) -> pa.Array:
    """Per group, the list of ``values`` of its rows ``included`` (NULL for a group with none), in row order."""
    rows = np.flatnonzero(included)
    if not len(rows):
        return pa.nulls(groups, pa.list_(values.type))
    # Arrow's hash_list takes no structs: list the rows' positions, then take the values at them.
    table = pa.table({"gid": pa.array(gids[rows]), "row": pa.array(rows)})
    result = table.group_by("gid", use_threads=False).aggregate([("row", "list")])
    positions = result["row_list"].combine_chunks()
    lists = pa.ListArray.from_arrays(positions.offsets, values.take(positions.values))
    return _placed(result["gid"].to_numpy(), lists, groups)


def _head_struct(t: pa.Table) -> pa.StructArray:
    columns = {
        "start_ns": t["start_ns"], "inv": pc.equal(t["operation"], "invoke_agent"),
        **{name: t[name] for name, _, _ in p.HEAD_FIELDS[2:-1]}, "agent_hint": _agent_hint(t),
    }
    arrays = [(c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c).cast(_HEAD_TYPE.field(n).type)
              for n, c in columns.items()]
    return pa.StructArray.from_arrays(arrays, fields=list(_HEAD_TYPE))


def _filtered(t: pa.Table, mask: np.ndarray) -> pa.Table:
    return t if mask.all() else t.filter(pa.array(mask))


def _trace_parts(spans: pa.Table, scores: pa.Table, gids: np.ndarray, score_gids: np.ndarray, keys: pa.Array,
                 ) -> pa.Table:
    groups = len(keys)
    out: dict[str, pa.Array] = {"trace_id": keys}
    scalar_parts = tuple(part for part in _SPAN_PARTS if part.name != "model_spans")
    out.update(_parts_columns(scalar_parts, _span_inputs, spans, gids, groups))
    # The model spans (a set of structs: a span id is unique in its trace once duplicates are dropped, so a list).
    structs = pa.StructArray.from_arrays([spans["span_id"].combine_chunks(), spans["parent_span_id"].combine_chunks()],
                                         fields=list(_MODEL_SPAN_TYPE))
    out["model_spans"] = _listed(structs, gids, groups, _condition(_model_operation(spans), len(spans)))
    # The candidate heads of a trace with no run id.
    operation_agent = pc.fill_null(pc.equal(spans["operation"], "invoke_agent"), False)
    head = _condition(pc.and_(pc.is_null(spans["run_id"]),
                              pc.or_(operation_agent, pc.is_null(spans["parent_span_id"]))), len(spans))
    head_parts = tuple(part for part in p.TRACE_PARTS if part.name in ("inv_n", "inv_call_id", "root_call_id"))
    out.update(_parts_columns(head_parts, _head_inputs, spans, gids, groups, head))
    out["heads"] = _listed(_head_struct(spans), gids, groups, head)
    # The verdict: every score with a pass/fail passed (``scores`` holds only those).
    by_trace = _Groups(score_gids, groups, np.zeros(len(scores), dtype=np.int64))
    out.update(_part_columns(p.VERDICT_PART, scores["passed"], None, by_trace, len(scores)))
    # A trace with scores only (none of its spans in this batch) has NULL span parts, as the FULL JOIN leaves it.
    return pa.table({name: out[name].cast(TRACE_SCHEMA.field(name).type) for name in TRACE_SCHEMA.names},
                    schema=TRACE_SCHEMA)


def _attempt_parts(spans: pa.Table, trace_gids: np.ndarray, traces: int) -> pa.Table:
    with_run = _condition(pc.is_valid(spans["run_id"]), len(spans))
    rows = np.flatnonzero(with_run)
    if not len(rows):
        return ATTEMPT_SCHEMA.empty_table()
    run_gids, _ = _group_ids(spans["run_id"])
    pair = run_gids[rows] * traces + trace_gids[rows]
    _, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    gids = np.zeros(len(spans), dtype=np.int64)
    gids[rows] = inverse
    out = _parts_columns(p.ATTEMPT_PARTS, _attempt_inputs, spans, gids, len(first),
                         None if len(rows) == len(spans) else with_run)
    out["run_id"] = _at(spans["run_id"], rows[first])
    out["trace_id"] = _at(spans["trace_id"], rows[first])
    return pa.table({name: out[name].cast(ATTEMPT_SCHEMA.field(name).type) for name in ATTEMPT_SCHEMA.names},
                    schema=ATTEMPT_SCHEMA)


def batch_parts(spans: pa.Table, scores: pa.Table) -> BatchParts:
    """The parts of the rows of ``spans`` and ``scores`` (span_store's SPAN_SCHEMA and SCORE_SCHEMA): what
    ``runs_parts.trace_batch`` and ``attempt_batch`` give over the same rows stored."""
    spans = spans.select(p.SPAN_INPUTS)  # filters and takes below copy only what the parts read
    # Only scores with a pass/fail count (a trace with none of those and no spans here has no row).
    scores = _filtered(scores.select(SCORE_INPUTS), _condition(pc.is_valid(scores["passed"]), len(scores)))
    all_ids = pa.chunked_array([*spans["trace_id"].chunks, *scores["trace_id"].chunks], pa.string())
    gids, keys = _group_ids(all_ids)
    span_gids, score_gids = gids[:len(spans)], gids[len(spans):]
    return BatchParts(_trace_parts(spans, scores, span_gids, score_gids, keys),
                      _attempt_parts(spans, span_gids, len(keys)), spans.num_rows, scores.num_rows)

