"""The heal benchmark's errors: each has a stable code and a one-line hint (STYLE 5)."""

from __future__ import annotations

from lousho.kernel.errors import LoushoError, UsageError


class ForeignRuns(LoushoError):
    """The observe database holds runs of an agent that is not the benchmark's: stop before any model
    sees them (a live editor would read them as evidence)."""

    code = "LOUSHO_BENCH_FOREIGN_RUNS"
    hint = ("give the benchmark a database of its own (--db), or leave --db unset for a fresh one; every agent "
            "it runs is named heal-bench-...")


class LiveGuardTripped(BaseException):
    """Raised from inside the loop (before an editor call) when the guard finds a foreign run.

    A BaseException (STYLE 6): the improve step turns every LoushoError into "the step could not run" and
    carries on, and this must stop the benchmark instead. The runner turns it into :class:`ForeignRuns`.
    """

    def __init__(self, agents: list[str], where: str) -> None:
        super().__init__(f"{where}: the observe database holds runs of {', '.join(agents[:5])}")
        self.agents = agents
        self.where = where


class UnknownScenario(UsageError):
    code = "LOUSHO_BENCH_UNKNOWN_SCENARIO"
    hint = "--scenarios takes all, or a comma-separated list of names shown by `lousho bench heal --help`"


class AttemptsInvalid(UsageError):
    code = "LOUSHO_BENCH_ATTEMPTS_INVALID"
    hint = "--attempts full (each bar's count), or a positive number of attempts per scenario"


class LiveOptionsMissing(UsageError):
    code = "LOUSHO_BENCH_LIVE_OPTIONS"
    hint = "--live needs --model-url and --model (and optionally --editor-model-url with --editor-model)"


class RowsInvalid(UsageError):
    code = "LOUSHO_BENCH_ROWS_INVALID"
    hint = "--report reads the JSONL file a benchmark run wrote with --out; run the benchmark first"
