"""Errors of the plot part. Codes are data: callers match on ``code``, never on the message."""

from __future__ import annotations

from lousho.kernel.errors import LoushoError, UsageError


class PlotError(LoushoError):
    code = "LOUSHO_PLOT_ERROR"


class NoWatchedEdit(UsageError):
    """The agent directory's loop state names no applied edit (or not the one asked for)."""

    code = "LOUSHO_PLOT_NO_WATCHED_EDIT"
    hint = ("the monitor watches an edit once `lousho improve DIR --apply` applied one; "
            "`lousho improve audit DIR` lists every apply, and --revision REV picks one")


class UnknownAgent(UsageError):
    code = "LOUSHO_PLOT_UNKNOWN_AGENT"
    hint = "`lousho sql \"SELECT DISTINCT agent FROM runs\"` lists the agents the store has runs of"


class NoRuns(PlotError):
    """The store holds runs of the agent, but none the plot can draw (none scored, none on a side)."""

    code = "LOUSHO_PLOT_NO_RUNS"
    hint = "only scored live runs count (probe runs never do); check the store with `lousho runs --agent A`"


class BadOutput(UsageError):
    code = "LOUSHO_PLOT_BAD_OUTPUT"
    hint = "name the file with a .png suffix (or .svg, .pdf): the suffix picks the format"
