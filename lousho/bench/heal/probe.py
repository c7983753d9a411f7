"""The check module every scenario's cycle takes: its cases, and a ``probe`` that runs one case on a
fresh copy of the project and scores it by the files the run left (``check`` alone sees only text).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lousho.agent.directory import harness_revision
from lousho.agent.verdict import Verdict
from lousho.bench.heal.runs import Runner
from lousho.improve.check_module import CheckModule
from lousho.improve.records import Case, RunRecord


@dataclass
class BenchProbe:
    """``probe(harness_dir, case, repeat) -> RunRecord`` (DESIGN §6) on the benchmark's runner.

    ``on_run(case, repeat)`` is called before each run: the kill-switch scenario flips the switch from
    it at the moment it tests (the gate's and the canary's runs have their own repeat numbers).
    """

    runner: Runner
    on_run: Callable[[Case, int], None] | None = None

    def __call__(self, harness_dir: Path, case: Case, repeat: int) -> RunRecord:
        if self.on_run is not None:
            self.on_run(case, repeat)
        revision = harness_revision(Path(harness_dir))
        out = self.runner.run(Path(harness_dir), case.input, case_id=case.id, probe=True)
        # What the run spent, split so the gate can price it in dollars when its model has a price.
        spend = {"tokens": out.tokens, "requests": out.requests, "input_tokens": out.usage.input_tokens,
                 "output_tokens": out.usage.output_tokens, "cache_read_tokens": out.usage.cache_read_tokens,
                 "model": self.runner.model_name}
        if out.result is None:
            return RunRecord(case.id, revision, repeat, "cannot-score", finish_reason="error", error=out.error,
                             **spend)
        result, verdict = out.result, out.verdict
        return RunRecord(case.id, revision, repeat, verdict.status, output=result.output,
                         failed_check=verdict.failed_check, explanation=verdict.explanation,
                         finish_reason=result.finish_reason, error=(result.error or {}).get("message"),
                         messages=result.messages, **spend)


def check_module(cases: Sequence[Case], probe: BenchProbe, name: str) -> CheckModule:
    frozen = list(cases)
    return CheckModule(check=_text_only, cases=lambda: frozen, probe=probe, name=name)


def _text_only(input_text: str, output: str | None) -> Verdict:
    # Nothing in the loop calls it when a probe is given; a run's text alone cannot show which files it changed.
    return Verdict("cannot-score", explanation="the heal benchmark scores a run by the files it left (probe)")
