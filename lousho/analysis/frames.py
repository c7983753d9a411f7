"""Runs as Polars frames, read through ``lousho.observe.connect``, and their pass-rate metrics.

Probe runs (``lousho.probe``: runs the improve loop made) never count as live traffic: they are
left out of ``live_revision`` and, unless asked for, of ``runs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import polars as pl

from lousho.analysis.stats import pass_hat_k_arrays, wilson_arrays
from lousho.observe.client.store_client import StoreClient

LIVE = "live"


def runs(
    store: StoreClient,
    agent: str | None = None,
    revision: str | None = None,
    since: datetime | int | None = None,
    *,
    include_probes: bool = False,
    columns: Sequence[str] | None = None,
) -> pl.DataFrame:
    """One row per run (the ``runs`` view's columns, or only ``columns``), oldest first.

    ``revision`` may be ``"live"``; ``since`` is a datetime (UTC when naive) or nanoseconds. Asking for the
    columns a summary needs (``PASS_RATE_COLUMNS``) leaves the runs' input and output text in the store.
    """
    if revision == LIVE:
        if agent is None:
            raise ValueError("revision='live' needs an agent")
        found, revision = resolve_live(store, agent)
        if not found:
            return _empty_runs(store)
        # The live revision may be the unversioned one (NULL): runs with nothing to fingerprint.
        post_filter, post_params = ["harness_revision IS NOT DISTINCT FROM ?"], [revision]
    elif revision is not None:
        post_filter, post_params = ["harness_revision = ?"], [revision]
    else:
        post_filter, post_params = [], []
    # ``runs`` is kept (runs_table.py): filtering its rows costs less than aggregating even a few runs.
    if agent is not None:
        post_filter.append("agent = ?")
        post_params.append(agent)
    if since is not None:
        post_filter.append("started_ns >= ?")
        post_params.append(_ns(since))
    if not include_probes:
        post_filter.append("NOT probe")
    where = f"WHERE {' AND '.join(post_filter)}" if post_filter else ""
    select = "*" if columns is None else ", ".join(_column(name) for name in columns)
    return store.sql(f"SELECT {select} FROM runs {where} ORDER BY started_ns, run_id", post_params)


def _column(name: str) -> str:
    if not name.isidentifier():
        raise ValueError(f"not a column name: {name!r}")
    return f'"{name}"'



def live_revision(store: StoreClient, agent: str) -> str | None:
    """The newest harness revision the agent's non-probe runs used; None when it has none (no runs, or
    runs with nothing to fingerprint: see ``resolve_live``)."""
    return resolve_live(store, agent)[1]


def resolve_live(store: StoreClient, agent: str) -> tuple[bool, str | None]:
    """(whether the agent has non-probe runs, its live revision): a live revision of None with runs is the
    unversioned one."""
    # Over the runs, not the spans with a lousho run id: a run may be any GenAI trace (runs_view). Runs
    # with no revision at all (nothing to fingerprint) are one unversioned revision, live when no run has one.
    frame = store.sql(
        "SELECT count(*) AS n, arg_max(harness_revision, started_ns) AS revision FROM runs "
        "WHERE agent = ? AND NOT probe",
        [agent],
    )
    if not frame.height or not frame["n"][0]:
        return False, None
    return True, frame["revision"][0]


# What ``pass_rates`` reads of a run.
PASS_RATE_COLUMNS = ("harness_revision", "case_id", "passed", "input_tokens", "output_tokens", "cost_usd")


def pass_rates(frame: pl.DataFrame, by: str | list[str] = "harness_revision", k: int = 3) -> pl.DataFrame:
    """Pass rate with a 95% Wilson interval, unbiased pass^k, tokens and cost per passing run, by ``by``.

    Only scored runs count (``passed`` not NULL). pass^k is averaged over cases (``case_id``),
    each case's ``C(c, k) / C(n, k)`` over its scored runs; cases with fewer than k runs are left
    out of it. Tokens per passing run is all input plus output tokens over the number of passing runs
(NULL with no pass), the definition the gate's cost rule uses; cost per passing run is the same in
    USD over the runs' ``cost_usd`` (NULL also when no run has a known cost).
    """
    keys = [by] if isinstance(by, str) else list(by)
    scored = frame.filter(pl.col("passed").is_not_null()).with_columns(
        tokens=pl.col("input_tokens").fill_null(0) + pl.col("output_tokens").fill_null(0)
    )
    if scored.height == 0:
        return pl.DataFrame(schema={**{key: frame.schema.get(key, pl.String) for key in keys},
                                    "runs": pl.UInt32, "passes": pl.Int64, "pass_rate": pl.Float64,
                                    "wilson_low": pl.Float64, "wilson_high": pl.Float64,
                                    f"pass_hat_{k}": pl.Float64, "tokens_per_passing_run": pl.Float64,
                                    "cost_usd": pl.Float64, "cost_per_passing_run": pl.Float64})
    summary = (
        scored.group_by(keys)
        .agg(
            runs=pl.len(),
            passes=pl.col("passed").cast(pl.Int64).sum(),
            tokens=pl.col("tokens").sum(),
            # Summed over the runs with a known cost; NULL when none has one (unknown is not free).
            cost_usd=pl.when(pl.col("cost_usd").is_not_null().any()).then(pl.col("cost_usd").sum()),
        )
        .with_columns(
            pass_rate=pl.col("passes") / pl.col("runs"),
            # What a success costs: all tokens over passing runs (the gate's cost rule uses the same).
            tokens_per_passing_run=pl.when(pl.col("passes") > 0).then(pl.col("tokens") / pl.col("passes")),
            cost_per_passing_run=pl.when(pl.col("passes") > 0).then(pl.col("cost_usd") / pl.col("passes")),
        )
    )
    low, high = wilson_arrays(summary["passes"].to_numpy(), summary["runs"].to_numpy())
    summary = summary.with_columns(wilson_low=pl.Series(low), wilson_high=pl.Series(high))
    # Grouped by case too, unless the caller already groups by case (a key named twice is an error).
    case_keys = keys if "case_id" in keys else [*keys, "case_id"]
    per_case = (
        scored.group_by(case_keys)
        .agg(n=pl.len(), c=pl.col("passed").cast(pl.Int64).sum())
        .filter(pl.col("n") >= k)
    )
    if per_case.height:
        values = pass_hat_k_arrays(per_case["c"].to_numpy(), per_case["n"].to_numpy(), k)
        per_case = per_case.with_columns(pass_hat=pl.Series(np.asarray(values, dtype=float)))
        hat = per_case.group_by(keys).agg(pl.col("pass_hat").mean().alias(f"pass_hat_{k}"))
        summary = summary.join(hat, on=keys, how="left")
    else:
        summary = summary.with_columns(pl.lit(None, dtype=pl.Float64).alias(f"pass_hat_{k}"))
    return summary.select(*keys, "runs", "passes", "pass_rate", "wilson_low", "wilson_high",
                          f"pass_hat_{k}", "tokens_per_passing_run", "cost_usd", "cost_per_passing_run").sort(keys)


def _ns(since: datetime | int) -> int:
    if isinstance(since, int):
        return since
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return int(since.timestamp() * 1_000_000) * 1000


def _empty_runs(store: StoreClient) -> pl.DataFrame:
    return store.sql("SELECT * FROM runs WHERE false")
