"""Runs as Polars frames, read through ``lousho.observe.connect``, and their pass-rate metrics.

Probe runs (``lousho.probe``: runs the improve loop made) never count as live traffic: they are
left out of ``live_revision`` and, unless asked for, of ``runs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import polars as pl

from lousho.analysis.clustered import interval_from_cluster_sums
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


# What ``pass_rates`` reads of a run: the session and case cluster its interval.
PASS_RATE_COLUMNS = ("harness_revision", "case_id", "conversation_id", "passed", "input_tokens", "output_tokens",
                     "cost_usd")

# ``pass_rates``' intervals by name, and what each says of itself in the ``ci_method`` column.
INTERVALS = ("clustered", "wilson")
CI_METHODS = {
    "clustered": "95% cluster-robust (Wilson at runs / design effect, t on the cluster sums, all 5% to one bound "
                 "where the other cannot miss, with t at clusters - 1): clusters are sessions (conversation_id), "
                 "else case_id, else the run; covers 0.94-0.96 in sessions at 60-1,000 runs and true rates 0.6-0.95 "
                 "(docs/statistics.md §8)",
    "wilson": "95% Wilson: assumes independent runs; covers 0.62-0.93 when runs cluster in sessions "
              "(docs/statistics.md §8)",
}


def pass_rates(frame: pl.DataFrame, by: str | list[str] = "harness_revision", k: int = 3,
               interval: str = "clustered") -> pl.DataFrame:
    """Pass rate with a 95% interval, unbiased pass^k, tokens and cost per passing run, by ``by``.

    Only scored runs count (``passed`` not NULL). The interval (``ci_low``, ``ci_high``) is by default
    cluster-robust: runs of one session (``conversation_id``) share a case and often an outcome, so they are
    clustered by session, a run without one by its ``case_id``, a run with neither is its own cluster
    (``clustered.interval_from_cluster_sums``; with no session and no case it is Wilson's). ``clusters`` counts
    them and ``design_effect`` is the variance's ratio to independent runs. ``interval="wilson"`` gives the
    Wilson interval instead, which assumes independent runs; ``ci_method`` names the interval in use, its
    clustering and its coverage. pass^k is averaged over cases (``case_id``),
    each case's ``C(c, k) / C(n, k)`` over its scored runs; cases with fewer than k runs are left
    out of it. Tokens per passing run is all input plus output tokens over the number of passing runs
    (NULL with no pass), the definition the gate's cost rule uses; cost per passing run is the same in
    USD over the runs' ``cost_usd`` (NULL also when no run has a known cost).
    """
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {', '.join(INTERVALS)}, not {interval!r}")
    keys = [by] if isinstance(by, str) else list(by)
    scored = frame.filter(pl.col("passed").is_not_null()).with_columns(
        tokens=pl.col("input_tokens").fill_null(0) + pl.col("output_tokens").fill_null(0)
    )
    columns = [*keys, "runs", "passes", "pass_rate", "ci_low", "ci_high", "ci_method", "clusters",
               "design_effect", f"pass_hat_{k}", "tokens_per_passing_run", "cost_usd", "cost_per_passing_run"]
    if scored.height == 0:
        return pl.DataFrame(schema={**{key: frame.schema.get(key, pl.String) for key in keys},
                                    "runs": pl.UInt32, "passes": pl.Int64, "pass_rate": pl.Float64,
                                    "ci_low": pl.Float64, "ci_high": pl.Float64, "ci_method": pl.String,
                                    "clusters": pl.Int64, "design_effect": pl.Float64,
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
        .join(_cluster_sums(scored, keys), on=keys, how="left", nulls_equal=True)
    )
    runs_, passes_ = summary["runs"].to_numpy().astype(float), summary["passes"].to_numpy()
    low, high, deff = interval_from_cluster_sums(runs_, passes_ / runs_, summary["s2"].to_numpy(),
                                                 summary["s4"].to_numpy(), summary["clusters"].to_numpy(),
                                                 summary["m2"].to_numpy())
    if interval == "wilson":
        low, high = wilson_arrays(passes_, summary["runs"].to_numpy())
    summary = summary.with_columns(ci_low=pl.Series(low), ci_high=pl.Series(high),
                                   ci_method=pl.lit(CI_METHODS[interval]), design_effect=pl.Series(deff))
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
        summary = summary.join(hat, on=keys, how="left", nulls_equal=True)
    else:
        summary = summary.with_columns(pl.lit(None, dtype=pl.Float64).alias(f"pass_hat_{k}"))
    return summary.select(columns).sort(keys)


def _cluster_sums(scored: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per group: its clusters, the sums over them of the squared and fourth-power residual sums (passes
    minus runs times the group's rate) and of their squared sizes, what ``clustered.interval_from_cluster_sums``
    needs. A cluster is the
    session, else the case, else the run (a row index); each kind of label has its own column, the others
    NULL, so a session never merges with a case of the same name."""
    session = pl.col("conversation_id") if "conversation_id" in scored.columns else pl.lit(None, pl.String)
    case = pl.col("case_id") if "case_id" in scored.columns else pl.lit(None, pl.String)
    labelled = (
        scored.lazy()
        .select(*keys, "passed", _session=session, _case=case)
        .with_columns(_case=pl.when(pl.col("_session").is_null()).then(pl.col("_case")))
        .with_row_index("_row")
        .with_columns(_row=pl.when(pl.col("_session").is_null() & pl.col("_case").is_null()).then(pl.col("_row")))
    )
    return (
        labelled.group_by([*keys, "_session", "_case", "_row"])
        .agg(n=pl.len(), x=pl.col("passed").cast(pl.Int64).sum())
        .with_columns(residual=pl.col("x") - pl.col("n") * (pl.col("x").sum() / pl.col("n").sum()).over(keys))
        .group_by(keys)
        .agg(clusters=pl.len().cast(pl.Int64), s2=(pl.col("residual") ** 2).sum(), s4=(pl.col("residual") ** 4).sum(),
             m2=(pl.col("n").cast(pl.Float64) ** 2).sum())
        .collect()
    )


def _ns(since: datetime | int) -> int:
    if isinstance(since, int):
        return since
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return int(since.timestamp() * 1_000_000) * 1000


def _empty_runs(store: StoreClient) -> pl.DataFrame:
    return store.sql("SELECT * FROM runs WHERE false")
