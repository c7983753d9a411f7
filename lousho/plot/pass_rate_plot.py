"""Pass rate by harness revision over time: each revision's cumulative pass rate after each of its
scored runs, with the 95% interval ``analysis.pass_rates`` gives around it (cluster-robust by session, else
case, else run), so a revision with few runs, or with runs that come in a few sessions, shows as the wide
band it is."""

from __future__ import annotations

import numpy as np
import polars as pl
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

from lousho.analysis.clustered import interval_from_cluster_sums
from lousho.plot._canvas import new_figure

NO_REVISION = "(no revision)"


def pass_rate_paths(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per scored run, oldest first: its revision, time, and the revision's cumulative runs,
    passes, pass rate and 95% interval (``ci_low``, ``ci_high``: ``pass_rates``' cluster-robust one) up to
    and including it. Unscored runs carry no verdict."""
    scored = (
        frame.filter(pl.col("passed").is_not_null())
        .sort("started_ns", "run_id")
        .with_columns(harness_revision=pl.col("harness_revision").fill_null(NO_REVISION),
                      _cluster=_cluster_label(frame))
        .with_columns(
            runs=pl.int_range(1, pl.len() + 1).over("harness_revision"),
            passes=pl.col("passed").cast(pl.Int64).cum_sum().over("harness_revision"),
            # The run's cluster before it: its runs and passes so far (the sums below grow by its step).
            _n=pl.int_range(pl.len()).over("harness_revision", "_cluster"),
            _x=(pl.col("passed").cast(pl.Int64).cum_sum() - pl.col("passed").cast(pl.Int64))
            .over("harness_revision", "_cluster"),
        )
    )
    if scored.height == 0:
        return scored.select("harness_revision", "started_ns", "runs", "passes").with_columns(
            pass_rate=pl.lit(None, pl.Float64), ci_low=pl.lit(None, pl.Float64), ci_high=pl.lit(None, pl.Float64))
    low, high = _cumulative_intervals(scored)
    return scored.select(
        "harness_revision",
        "started_ns",
        "runs",
        "passes",
        pass_rate=pl.col("passes") / pl.col("runs"),
        ci_low=pl.Series(low),
        ci_high=pl.Series(high),
    )


def _cluster_label(frame: pl.DataFrame) -> pl.Expr:
    """The run's cluster as ``pass_rates`` has it: its session, else its case, else the run itself."""
    parts = [pl.lit("s:") + pl.col("conversation_id")] if "conversation_id" in frame.columns else []
    parts += [pl.lit("c:") + pl.col("case_id")] if "case_id" in frame.columns else []
    return pl.coalesce(*parts, pl.lit("r:") + pl.col("run_id").cast(pl.String))


def _cumulative_intervals(scored: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """After each run, the interval from the clusters' sums so far: each run adds to its cluster, and the sums
    of (passes - runs * p)^2 and ^4 over clusters are polynomials in p of the clusters' power sums
    sum x^a n^b, which grow run by run (cumulated per revision); with a = 0, b = 2 it is the clusters' squared
    sizes, which give their effective number."""
    y = scored["passed"].cast(pl.Int64).to_numpy().astype(float)
    x0, n0 = scored["_x"].to_numpy().astype(float), scored["_n"].to_numpy().astype(float)
    x1, n1 = x0 + y, n0 + 1.0
    step = {(a, b): x1 ** a * n1 ** b - x0 ** a * n0 ** b
            for a, b in ((2, 0), (1, 1), (0, 2), (4, 0), (3, 1), (2, 2), (1, 3), (0, 4))}
    frame = pl.DataFrame({f"a{a}{b}": v for (a, b), v in step.items()} | {
        "revision": scored["harness_revision"], "new": (n0 == 0).astype(float)})
    sums = frame.select(pl.exclude("revision").cum_sum().over("revision"))
    a = {name: sums[name].to_numpy() for name in sums.columns}
    n = scored["runs"].to_numpy().astype(float)
    p = scored["passes"].to_numpy() / n
    s2 = a["a20"] - 2 * p * a["a11"] + p ** 2 * a["a02"]
    s4 = (a["a40"] - 4 * p * a["a31"] + 6 * p ** 2 * a["a22"] - 4 * p ** 3 * a["a13"] + p ** 4 * a["a04"])
    low, high, _ = interval_from_cluster_sums(n, p, np.maximum(s2, 0.0), np.maximum(s4, 0.0), a["new"], a["a02"])
    return low, high


def draw_pass_rates(agent: str, paths: pl.DataFrame) -> Figure:
    """One line and band per revision, in the order each was first run; the legend holds the totals."""
    figure, (axes,) = new_figure(9.0, 5.0)
    order = paths.group_by("harness_revision").agg(pl.col("started_ns").min()).sort("started_ns")
    colours = [f"C{i % 10}" for i in range(order.height)]
    for revision, colour in zip(order["harness_revision"], colours, strict=True):
        rows = paths.filter(pl.col("harness_revision") == revision)
        when = rows["started_ns"].cast(pl.Datetime("ns")).to_numpy()
        last = rows.row(-1, named=True)
        label = (f"{revision[:12]}: {last['passes']}/{last['runs']} = {last['pass_rate']:.2f} "
                 f"[{last['ci_low']:.2f}, {last['ci_high']:.2f}]")
        axes.fill_between(when, rows["ci_low"].to_numpy(), rows["ci_high"].to_numpy(), step="post",
                          color=colour, alpha=0.18, linewidth=0)
        axes.plot(when, rows["pass_rate"].to_numpy(), drawstyle="steps-post", color=colour, linewidth=1.6,
                  label=label)
    locator = AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes.set_ylim(-0.02, 1.05)
    axes.set_xlabel("run start (UTC)")
    axes.set_ylabel("cumulative pass rate (95%, clustered by session)")
    axes.grid(alpha=0.3)
    axes.legend(title="harness revision: passes/runs = rate [95% CI]", loc="lower left", fontsize="small",
                title_fontsize="small")
    figure.suptitle(f"{agent}: pass rate by harness revision ({paths.height} scored live runs)",
                    fontsize="medium")
    return figure
