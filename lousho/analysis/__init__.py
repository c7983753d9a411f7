"""analysis: runs and cases as Polars frames, statistics with exact operating characteristics."""

from lousho.analysis.cases import cases_from_failures, cases_from_recoveries
from lousho.analysis.frames import live_revision, pass_rates, runs

__all__ = ["cases_from_failures", "cases_from_recoveries", "live_revision", "pass_rates", "runs"]
