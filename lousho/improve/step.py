"""One improvement step, ``improve_agent()`` (seed §3.2, §3.3): it proposes an edit or keeps the base,
and writes nothing to the agent directory.

1. Run the training cases on the current harness; stop if all pass.
2. The invariant and domain editors (k of each with ``proposers``) propose from the failed runs; each
   proposal is probed on the same cases.
3. The composer merges what the probes support, or nothing changes.
4. The gate judges the composed harness on fresh runs; if it fails, each editor's own improving
   harness is tried through the same checks, cheapest first. With ``mode="seq"`` each of k rounds
   edits the last round's checkpoint and the checkpoints are gated, newest first. With ``select``
   every candidate is gated and a blind selector picks among those that passed.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from lousho.agent import directory as agent_directory
from lousho.agent.verdict import Check
from lousho.improve import injection
from lousho.improve.cache import Cache, CachedClient, Ledger
from lousho.improve.check_module import CheckModule, load_check_module, module_cases, unique_ids
from lousho.improve.composer import Probed, compose
from lousho.improve.editors import EditorSpec, Evidence, Proposal, run_editor
from lousho.improve.errors import CheckModuleInvalid, ImproveError, NoCases, ProbeFailed, Stopped
from lousho.improve.gate import SEARCH_REPEATS, Gate, GateDecision
from lousho.improve.harness import Harness, diff, is_reference_agent, read_harness
from lousho.improve.harness import agent_name as default_agent_name
from lousho.improve.options import StepOptions
from lousho.improve.pricing import PerPass, cost_unit, in_unit, per_pass
from lousho.improve.probe import AgentProbe, UserProbe
from lousho.improve.records import Case, Recovery, RunRecord
from lousho.improve.result import Cost, Decision, ImproveResult
from lousho.improve.runner import Runner
from lousho.improve.selector import select_harness
from lousho.improve.store_cases import cases_from_store, merge_cases
from lousho.kernel.errors import LoushoError
from lousho.models.config import ModelConfig
from lousho.models.protocol import ModelClient

Progress = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    harness: Harness
    # What a passing run cost in its probe; the fallbacks and the selector's fallback go cheapest first.
    per_pass: PerPass = PerPass(float("inf"), None)


def improve_agent(
    agent_dir: str | Path,
    check: str | Path | ModuleType | CheckModule | Check,
    options: StepOptions | None = None,
    *,
    cases: Sequence[Case | str | Mapping[str, Any]] | None = None,
    recoveries: Sequence[Recovery] = (),
    lessons: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    editor_client: ModelClient | None = None,
    progress: Progress | None = None,
    stop_check: Callable[[], str | None] | None = None,
) -> ImproveResult:
    """One step on ``agent_dir`` judged by ``check``, searching as ``options`` say (the defaults without).

    ``cases`` replaces the check module's cases; ``recoveries`` and ``lessons`` are more evidence for the
    editors; ``editor_client`` replaces a client made from ``options.editor_model``; ``stop_check`` returns
    a reason to stop (the kill switch). Never raises for a problem of the inputs or of a model: the result
    is then ``keep-base`` with the reason and ``error`` (code, message, hint).
    """
    root = Path(agent_dir)
    step: _Step | None = None
    try:
        options = options or StepOptions()
        options.validate()
        step = _Step(root, load_check_module(check), options, _Inputs(
            cases, tuple(recoveries), tuple(lessons), dict(os.environ if environ is None else environ), editor_client,
            progress or (lambda _: None), stop_check or (lambda: None)))
        return step.run()
    except LoushoError as e:
        reason = f"the step could not run: {e.message}"
        error = {"code": e.code, "message": e.message, "hint": e.hint}
        if step is None:
            return ImproveResult("keep-base", reason, str(root), error=error)
        return dataclasses.replace(step._result("keep-base", reason, None), error=error)


def build_runner(agent_dir: Path, module: CheckModule, model: ModelConfig | None, environ: Mapping[str, str],
                 work_dir: Path, cache: Cache, ledger: Ledger) -> Runner:
    """Runs cases under harnesses with the check module's probe, or the reference agent on ``model``."""
    probe: Any
    if module.probe is not None:
        probe, probe_id = UserProbe(module.probe, module.check), f"probe:{module.name}"
    elif not is_reference_agent(agent_dir):
        raise CheckModuleInvalid(f"{agent_dir} holds a harness but not lousho's reference agent (no agent.toml), "
                                 "and the check module defines no probe()", code="LOUSHO_IMPROVE_NO_PROBE",
                                 hint="define probe(harness_dir, case, repeat) in the check module: it runs your "
                                      "agent on one case with the harness at harness_dir (docs/improve.md)")
    elif model is None:
        raise CheckModuleInvalid("no model for the agent and no probe() in the check module",
                                 code="LOUSHO_IMPROVE_NO_MODEL", hint="pass --model-url and --model")
    else:
        probe = AgentProbe(model, module.check, environ, read_only=module.read_only, work_dir=work_dir)
        probe_id = f"agent:{model.url}:{model.model}"
    return Runner(agent_dir, work_dir, probe, probe_id, cache, ledger)


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """What one call brings besides its options: evidence, the environment and its hooks."""

    cases: Sequence[Any] | None
    recoveries: tuple[Recovery, ...]
    lessons: tuple[str, ...]
    environ: dict[str, str]
    editor_client: ModelClient | None
    progress: Progress
    stop_check: Callable[[], str | None]


class _Step:
    """One step's working state: built from its options and inputs, then ``run`` once."""

    def __init__(self, root: Path, module: CheckModule, options: StepOptions, inputs: _Inputs) -> None:
        if is_reference_agent(root):
            agent_directory.load(root)  # the reference agent: the whole directory must load
        self.root, self.module, self.options, self.inputs = root, module, options, inputs
        self.progress = inputs.progress
        self.base = read_harness(root)
        self.cache = Cache(options.cache_dir, probes=options.cached_probe)
        self.ledger = Ledger(token_limit=options.token_budget)
        self.recoveries = inputs.recoveries
        self.decisions: list[Decision] = []
        self.flags: list[str] = []
        self.training: list[Case] = []
        self.held_out: list[Case] = []
        self.labels: dict[str, str] = {}
        self.helped: tuple[str, ...] = ()
        self.failed_names: list[str] = []
        self._no_candidate_reason = ""

    def run(self) -> ImproveResult:
        self.training, self.held_out = self._cases()
        self.labels = {c.id: f"training case {i}" for i, c in enumerate(self.training, 1)}
        self.labels.update({c.id: f"held-out case {i}" for i, c in enumerate(self.held_out, 1)})
        # By id and by input: a live run without a case id is keyed by its input's hash, so the same
        # held-out input can arrive under another id.
        held_ids, held_inputs = {c.id for c in self.held_out}, {c.input.strip() for c in self.held_out}
        self.recoveries = tuple(r for r in self.recoveries
                                if r.case_id not in held_ids and r.input.strip() not in held_inputs)
        with tempfile.TemporaryDirectory(prefix="lousho-improve-") as work:
            self.runner = build_runner(self.root, self.module, self.options.model, self.inputs.environ, Path(work),
                                       self.cache, self.ledger)
            try:
                result = self._search()
            finally:
                self.cache.append_ledger(self.ledger, {"agent_dir": str(self.root), "base": self.base.revision})
        return result

    # --- inputs ---

    def _cases(self) -> tuple[list[Case], list[Case]]:
        if self.inputs.cases is not None:
            try:
                cases = unique_ids([Case.from_value(v, i) for i, v in enumerate(self.inputs.cases)], "cases")
            except TypeError as e:
                raise CheckModuleInvalid(f"cases: {e}") from None
        else:
            cases = module_cases(self.module)
        options = self.options
        misnamed = None
        if options.observe is not None:
            held = [c.id for c in cases if c.held_out]
            store = cases_from_store(options.observe, options.agent_name or default_agent_name(self.root),
                                     recurring_only=options.recurring_only, held_out=held,
                                     token=options.observe_token, ca_cert=options.observe_ca_cert)
            cases = merge_cases(cases, store.cases)
            self.recoveries += tuple(store.recoveries)
            misnamed = store.misnamed
            if misnamed:
                self.flags.append(misnamed)
        training = [c for c in cases if not c.held_out]
        if not training:
            raise NoCases("no training cases: every case is held out, or there are none"
                          + (f"; {misnamed}" if misnamed else ""))
        return training, [c for c in cases if c.held_out]


    def _editor(self) -> ModelClient:
        inner = self.inputs.editor_client
        config = self.options.editor_model or self.options.model
        if inner is None:
            if config is None:
                raise CheckModuleInvalid("no model for the editors", code="LOUSHO_IMPROVE_NO_MODEL",
                                         hint="pass --editor-model-url and --editor-model (or --model-url, --model)")
            inner = config.client(self.inputs.environ)
        return CachedClient(inner, self.cache, self.ledger, config.model if config else "editor")

    # --- the search ---

    def _search(self) -> ImproveResult:
        self.progress("running the training cases on the current harness")
        base_runs = self.runner.run_many(self.base, self.training, SEARCH_REPEATS)
        scored = sum(r.status != "cannot-score" for rs in base_runs.values() for r in rs)
        if scored == 0:
            errors = sorted({r.error or "" for rs in base_runs.values() for r in rs})
            raise ProbeFailed(f"no run of the current harness could be scored: {'; '.join(errors)[:300]}")
        self._note("search", "current harness", "ran", f"{scored} of {_count(base_runs)} runs scored",
                   {self.labels[k]: f"{_passes(v)}/{len(v)}" for k, v in base_runs.items()})
        if all(r.passed for rs in base_runs.values() for r in rs):
            return self._keep(f"all {len(self.training)} training cases passed every run on the current harness")
        if not any(r.status == "fail" for rs in base_runs.values() for r in rs):
            return self._keep("no training run failed its check (the others could not be scored)")
        self.failed_names = sorted({r.failed_check for rs in base_runs.values() for r in rs if r.failed_check}
                                   | {n for c in self.training for n in c.failed_checks})
        stop = self.inputs.stop_check()
        if stop:
            raise Stopped(f"stopped before the editors: {stop}")
        editor = self._editor()
        if self.options.mode == "seq":
            candidates = self._seq_rounds(editor, base_runs)
        else:
            candidates = self._one_round(editor, base_runs)
        if not candidates:
            return self._keep(self._no_candidate_reason)
        return self._judge(editor, candidates)

    def _one_round(self, editor: ModelClient, base_runs: dict[str, list[RunRecord]]) -> list[Candidate]:
        proposers = self.options.proposers
        specs = [EditorSpec(role, i, proposers) for i in range(1, proposers + 1)
                 for role in ("invariant", "domain")]
        proposals = self._propose(editor, specs, self.base, self._evidence(base_runs, ()))
        probed = self._probe_all(proposals, base_runs)
        composition = compose(self.base, probed)
        self._note("compose", "composer", "merged" if composition.harness else "nothing", composition.reason,
                   {"merged_from": list(composition.merged_from), "conflicts": list(composition.conflicts)})
        if composition.harness is None or composition.harness.revision == self.base.revision:
            self._no_candidate_reason = (composition.reason if composition.harness is None
                                         else "the edits changed nothing")
            return []
        composed = next((p for p in probed if p.harness.revision == composition.harness.revision), None)
        cost = composed.per_pass if composed else PerPass(float("inf"), None)
        candidates = [Candidate("composed", composition.harness, cost)]
        # Fallbacks: each editor's own harness that improved a case, cheapest first (in dollars when all are priced).
        others = [p for p in probed if p.gains > 0 and p.harness.revision != composition.harness.revision]
        unit = cost_unit(p.per_pass for p in others)
        fallbacks = sorted(others, key=lambda p: (in_unit(p.per_pass, unit), len(diff(self.base, p.harness)), p.name))
        seen = {composition.harness.revision}
        for p in fallbacks:
            if p.harness.revision not in seen:
                seen.add(p.harness.revision)
                candidates.append(Candidate(p.name, p.harness, p.per_pass))
        return candidates

    def _seq_rounds(self, editor: ModelClient, base_runs: dict[str, list[RunRecord]]) -> list[Candidate]:
        checkpoint, runs = self.base, base_runs
        earlier: list[str] = []
        checkpoints: list[Candidate] = []
        self._no_candidate_reason = "no round produced a checkpoint"
        for round_no in range(1, self.options.proposers + 1):
            specs = [EditorSpec(role, 1, 1, round_no) for role in ("invariant", "domain")]
            proposals = self._propose(editor, specs, checkpoint, self._evidence(runs, tuple(earlier)))
            probed = self._probe_all(proposals, runs, checkpoint)
            composition = compose(checkpoint, probed)
            self._note("compose", f"round {round_no}", "merged" if composition.harness else "nothing",
                       composition.reason, {"merged_from": list(composition.merged_from)})
            if composition.harness is None or composition.harness.revision == checkpoint.revision:
                break
            summaries = "; ".join(f"{p.editor}: {p.summary}" for p in proposals if p.editor in composition.merged_from)
            earlier.append(f"{diff(checkpoint, composition.harness)}\n{summaries}")
            checkpoint = composition.harness
            runs = self.runner.run_many(checkpoint, self.training, SEARCH_REPEATS)
            passes = sum(_passes(v) for v in runs.values())
            checkpoints.append(Candidate(f"checkpoint {round_no}", checkpoint, per_pass(runs, time.time_ns())))
            self._note("checkpoint", f"round {round_no}", "made", f"{passes} of {_count(runs)} training runs pass",
                       {"revision": checkpoint.revision})
            if all(r.passed for rs in runs.values() for r in rs):
                break
        return list(reversed(checkpoints))  # newest first: each refines the one before

    def _propose(self, editor: ModelClient, specs: Sequence[EditorSpec], base: Harness,
                 evidence: Evidence) -> list[Proposal]:
        self.progress(f"{len(specs)} editors proposing")
        if self.options.parallel:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="lousho-editor") as pool:
                proposals = list(pool.map(lambda s: run_editor(s, base, evidence, editor), specs))
        else:
            proposals = [run_editor(s, base, evidence, editor) for s in specs]
        for p in proposals:
            outcome = "error" if p.error else "edit" if p.changed else "no edit"
            self._note("editor", p.editor, outcome, p.error or p.summary[:500],
                       {"refused_writes": list(p.findings), "files": p.base.changed_paths(p.harness)})
        if all(p.error for p in proposals):
            raise ImproveError("every editor failed: " + "; ".join(f"{p.editor}: {p.error}" for p in proposals)[:500],
                               code="LOUSHO_IMPROVE_EDITORS_FAILED",
                               hint="check --editor-model-url and --editor-model, and the editor model's logs")
        return proposals

    def _probe_all(self, proposals: Sequence[Proposal], base_runs: dict[str, list[RunRecord]],
                   base: Harness | None = None) -> list[Probed]:
        base = base or self.base
        changed = [p for p in proposals if p.changed]
        self.progress(f"probing {len(changed)} proposals")

        def probe(p: Proposal) -> Probed:
            runs = self.runner.run_many(p.harness, self.training, SEARCH_REPEATS)
            gains = sum(_passes(runs[c.id]) > _passes(base_runs[c.id]) for c in self.training)
            losses = sum(_passes(runs[c.id]) < _passes(base_runs[c.id]) for c in self.training)
            probed = Probed(p.editor, p.harness, sum(_passes(v) for v in runs.values()), gains, losses,
                            per_pass(runs, time.time_ns()))
            self._note("probe", p.editor, "supported" if probed.supported else "not supported",
                       f"training cases gained: {gains}, lost: {losses}",
                       {self.labels[k]: f"{_passes(base_runs[k])}->{_passes(v)} of {len(v)}" for k, v in runs.items()})
            return probed

        if self.options.parallel:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="lousho-probe") as pool:
                return list(pool.map(probe, changed))
        return [probe(p) for p in changed]

    def _evidence(self, runs: dict[str, list[RunRecord]], earlier: tuple[str, ...]) -> Evidence:
        failed: list[tuple[str, RunRecord]] = []
        for case in self.training:  # held-out cases are never run before the gate, so never shown
            for i, record in enumerate(runs[case.id], 1):
                if record.status == "fail":
                    failed.append((f"{self.labels[case.id]}, run {i}", record))
        if self.options.failure_names == "shuffled":
            failed = _shuffle_names(failed)
        return Evidence(tuple(failed), self.recoveries, earlier, self.inputs.lessons[:20],
                        show_failed_check=self.options.failure_names != "none")

    # --- judging ---

    def _judge(self, editor: ModelClient, candidates: list[Candidate]) -> ImproveResult:
        # Screened first, so the paired gate splits its level across exactly the candidates it may try.
        screened = [(c, f) for c in candidates if (f := self._screen(c)) is not None]
        gate = Gate(self.base, self.training, self.held_out, self.runner.run_many, self.labels, self.options.rules,
                    kind=self.options.gate, candidates=max(len(screened), 1))
        passed: list[tuple[Candidate, GateDecision]] = []
        for candidate, flags in screened:
            self.progress(f"gating {candidate.name}")
            decision = gate.decide(candidate.name, candidate.harness, flags)
            self._note("gate", candidate.name, "pass" if decision.passed else "reject", decision.reason,
                       decision.to_dict())
            if decision.passed:
                passed.append((candidate, decision))
                if not self.options.select:
                    break
        if not passed:
            return self._keep("no candidate passed the gate: " + "; ".join(
                f"{d.subject}: {d.reason}" for d in self.decisions if d.kind in ("gate", "quoted-check", "injection")))
        chosen, decision = passed[0]
        if self.options.select and len(passed) > 1:
            choice = select_harness(editor, self.base, [c.harness for c, _ in passed])
            unit = cost_unit(c.per_pass for c, _ in passed)
            cheapest = min(range(len(passed)), key=lambda i: (in_unit(passed[i][0].per_pass, unit), i))
            index = choice.index if choice.index is not None else cheapest
            chosen, decision = passed[index]
            self._note("select", chosen.name, "chosen" if choice.index is not None else "fallback: cheapest",
                       choice.reason, {"passers": [c.name for c, _ in passed]})
        self.flags.extend(decision.flags)
        by_label = {self.labels[c.id]: c.id for c in self.training}
        self.helped = tuple(by_label[r.label] for r in decision.rows if r.verdict == "helped")
        return self._result("proposal", f"{chosen.name} passed the gate: {decision.reason}", chosen)

    def _screen(self, candidate: Candidate) -> tuple[str, ...] | None:
        """The checks before the gate: injection (again, on the merged text) and quoted failed checks."""
        added = "\n".join(injection.added_text(self.base.files.get(p, ""), candidate.harness.files.get(p, ""))
                          for p in self.base.changed_paths(candidate.harness))
        findings = injection.injection_findings(added)
        if findings:
            self._note("injection", candidate.name, "reject", "the added text looks like a prompt injection: "
                       + ", ".join(findings))
            return None
        quoted = injection.quoted_checks(added, self.failed_names)
        # The names travel as evidence, exactly as the check module gave them; the reason is for people.
        if quoted and self.options.quoted_checks == "reject":
            self._note("quoted-check", candidate.name, "reject", "the edit quotes the failed check "
                       + ", ".join(repr(q) for q in quoted), {"checks": quoted})
            return None
        if quoted:
            flag = f"{candidate.name} quotes the failed check " + ", ".join(repr(q) for q in quoted)
            self._note("quoted-check", candidate.name, "flag", flag, {"checks": quoted})
            return (flag,)
        return ()

    # --- results ---

    def _note(self, kind: str, subject: str, outcome: str, reason: str, evidence: dict[str, Any] | None = None) -> None:
        self.decisions.append(Decision(kind, subject, outcome, reason, evidence or {}))

    def _keep(self, reason: str) -> ImproveResult:
        return self._result("keep-base", reason, None)

    def _result(self, outcome: Literal["proposal", "keep-base"], reason: str,
                chosen: Candidate | None) -> ImproveResult:
        ledger = self.ledger
        cost = Cost(ledger.requests, ledger.tokens, ledger.probe.run, ledger.editor.run, ledger.probe.cached,
                    ledger.editor.cached)
        files = {}
        if chosen is not None:
            files = {p: chosen.harness.files.get(p, "") for p in self.base.changed_paths(chosen.harness)}
        return ImproveResult(
            outcome, reason, str(self.root), self.base.revision,
            chosen.harness.revision if chosen else None, diff(self.base, chosen.harness) if chosen else "",
            files, chosen.name if chosen else None, tuple(self.decisions), cost, ledger.to_dict(), tuple(self.flags),
            training=tuple(self.training), held_out=tuple(self.held_out), helped=self.helped,
        )


def _passes(records: Sequence[RunRecord]) -> int:
    return sum(r.passed for r in records)


def _count(runs: Mapping[str, list[RunRecord]]) -> int:
    return sum(len(v) for v in runs.values())


def _shuffle_names(failed: list[tuple[str, RunRecord]]) -> list[tuple[str, RunRecord]]:
    """The failure-name study's control: every failed-check name moved to another run's record.

    Sorted by name and rotated by the largest count of one name, no record keeps its own name when no
    name is on more than half of them; the records that cannot get another name get "unnamed-check".
    Deterministic, so a replayed step shows the editors the same names.
    """
    names = [r.failed_check for _, r in failed]
    if not names:
        return failed
    order = sorted(range(len(names)), key=lambda i: names[i] or "")
    shift = max(Counter(names).values())
    moved = list(names)
    for k, i in enumerate(order):
        other = names[order[(k + shift) % len(order)]]
        moved[i] = other if other != names[i] else "unnamed-check"
    return [(t, dataclasses.replace(r, failed_check=n)) for (t, r), n in zip(failed, moved, strict=True)]
