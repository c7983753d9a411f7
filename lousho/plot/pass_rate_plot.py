"""Pass rate by harness revision over time: each revision's cumulative pass rate after each of its
scored runs, with the 95% Wilson interval around it (``analysis.stats.wilson_arrays``, as in
``pass_rates``), so a revision with few runs shows as the wide band it is."""

from __future__ import annotations

import polars as pl
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

from lousho.analysis.stats import wilson_arrays
from lousho.plot._canvas import new_figure

NO_REVISION = "(no revision)"


def pass_rate_paths(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per scored run, oldest first: its revision, time, and the revision's cumulative runs,
    passes, pass rate and Wilson bounds up to and including it. Unscored runs carry no verdict."""
    scored = (
        frame.filter(pl.col("passed").is_not_null())
        .sort("started_ns", "run_id")
        .with_columns(harness_revision=pl.col("harness_revision").fill_null(NO_REVISION))
        .with_columns(
            runs=pl.int_range(1, pl.len() + 1).over("harness_revision"),
            passes=pl.col("passed").cast(pl.Int64).cum_sum().over("harness_revision"),
        )
    )
    if scored.height == 0:
        return scored.select("harness_revision", "started_ns", "runs", "passes").with_columns(
            pass_rate=pl.lit(None, pl.Float64), wilson_low=pl.lit(None, pl.Float64),
            wilson_high=pl.lit(None, pl.Float64))
    low, high = wilson_arrays(scored["passes"].to_numpy(), scored["runs"].to_numpy())
    return scored.select(
        "harness_revision",
        "started_ns",
        "runs",
        "passes",
        pass_rate=pl.col("passes") / pl.col("runs"),
        wilson_low=pl.Series(low),
        wilson_high=pl.Series(high),
    )


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
                 f"[{last['wilson_low']:.2f}, {last['wilson_high']:.2f}]")
        axes.fill_between(when, rows["wilson_low"].to_numpy(), rows["wilson_high"].to_numpy(), step="post",
                          color=colour, alpha=0.18, linewidth=0)
        axes.plot(when, rows["pass_rate"].to_numpy(), drawstyle="steps-post", color=colour, linewidth=1.6,
                  label=label)
    locator = AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes.set_ylim(-0.02, 1.05)
    axes.set_xlabel("run start (UTC)")
    axes.set_ylabel("cumulative pass rate (95% Wilson)")
    axes.grid(alpha=0.3)
    axes.legend(title="harness revision: passes/runs = rate [95% CI]", loc="lower left", fontsize="small",
                title_fontsize="small")
    figure.suptitle(f"{agent}: pass rate by harness revision ({paths.height} scored live runs)",
                    fontsize="medium")
    return figure
