"""The demo's tables: analysis frames with the columns a person reads first, under names that wrap
at spaces (a narrow terminal breaks a header between words, never inside one)."""

from __future__ import annotations

import polars as pl


def rates_table(rates: pl.DataFrame) -> pl.DataFrame:
    """``pass_rates`` by revision: scored runs, passes, the rate with its 95% interval (cluster-robust by
    session, else case, unless the frame asked for Wilson's), pass^3 and tokens per passing run, each as text
    a person reads."""
    return rates.sort("runs", descending=True).select(
        pl.col("harness_revision").alias("revision"),
        pl.col("runs").alias("scored runs"),
        pl.col("passes"),
        _percent("pass_rate").alias("pass rate"),
        pl.format("{} to {}", _percent("ci_low"), _percent("ci_high")).alias("95% interval"),
        _percent("pass_hat_3").fill_null("too few runs").alias("pass^3"),
        pl.col("tokens_per_passing_run").round(0).cast(pl.Int64).alias("tokens per pass"),
    )


def cases_table(cases: pl.DataFrame) -> pl.DataFrame:
    """``cases_from_failures``: each case, how often it failed, the checks it missed and two of its runs."""
    return cases.select(
        pl.col("case_id").alias("case"),
        pl.col("count").alias("failed runs"),
        pl.col("failed_checks").list.join(", ").alias("failed checks"),
        (pl.col("run_ids").list.head(2).list.join(", ")
         + pl.when(pl.col("run_ids").list.len() > 2).then(pl.lit(", …")).otherwise(pl.lit("")))
        .alias("runs (first two)"),
    )


def _percent(column: str) -> pl.Expr:
    return pl.format("{}%", (pl.col(column) * 100).round(1))
