"""Errors of improve: the step's (each ends a step with outcome keep-base and its code as the reason)
and the writer's refusals."""

from __future__ import annotations

from lousho.kernel.errors import LoushoError, UsageError


class ImproveError(LoushoError):
    code = "LOUSHO_IMPROVE_FAILED"


class CheckModuleInvalid(UsageError):
    code = "LOUSHO_IMPROVE_CHECK_INVALID"
    hint = "a check module defines check(input, output) -> Verdict, and optionally cases() and probe()"


class OptionInvalid(UsageError):
    code = "LOUSHO_IMPROVE_OPTION_INVALID"
    hint = "see `lousho improve --help` and docs/improve.md for each option's values"


class CheckRaised(ImproveError):
    code = "LOUSHO_IMPROVE_CHECK_RAISED"
    hint = "fix the check module: check() must return a Verdict for every output, including None"


class NoCases(UsageError):
    code = "LOUSHO_IMPROVE_NO_CASES"
    hint = "give cases(): the check module's cases() or failed runs of the live revision in the store"


class BudgetExceeded(ImproveError):
    code = "LOUSHO_IMPROVE_BUDGET"
    hint = "the daily token budget (tokens_per_day in .lousho/improve.json) is spent; the next UTC day resets it"


class Stopped(ImproveError):
    code = "LOUSHO_IMPROVE_STOPPED"
    hint = "the kill switch is on: remove .lousho/improve.stop, unset LOUSHO_IMPROVE=off, or set enabled: true"


class ProbeFailed(ImproveError):
    code = "LOUSHO_IMPROVE_PROBE_FAILED"
    hint = "the agent's model could not be reached or answered garbage; check --model-url and the model's logs"


# The writer's refusals.


class StaleHarness(LoushoError):
    code = "LOUSHO_IMPROVE_STALE"
    hint = "the harness changed since this edit was made; run a new cycle on the current harness"


class WriteRefused(LoushoError):
    code = "LOUSHO_IMPROVE_WRITE_REFUSED"
    hint = "the edit's added text trips the injection checks; it was not written"


class LinkRefused(LoushoError):
    code = "LOUSHO_IMPROVE_LINK_REFUSED"
    hint = "replace the symbolic link with a real file or folder inside the agent directory, or edit that file by hand"


class RevisionMissing(LoushoError):
    code = "LOUSHO_IMPROVE_REVISION_MISSING"
    hint = "`lousho improve status DIR` lists the saved revisions"


class WriteFailed(LoushoError):
    code = "LOUSHO_IMPROVE_WRITE_FAILED"
    hint = ("the file system refused a harness file (a full disk, a permission, a plain file where a skill folder "
            "goes); what was written is undone: fix the cause, then run the command again (`lousho improve audit "
            "DIR` shows the undone write)")
