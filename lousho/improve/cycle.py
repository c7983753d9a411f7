"""One cycle of the self-healing loop (seed §4.1, §4.2): step, canary, then apply or queue.

    kill switch, budgets, cooldown -> cases (auto: recurring failures only) -> improve step
    -> replay canary -> auto: write (1 a UTC day), corpus guard, watch | manual: queue for a person
    (-> approve: write if not stale, guard, watch) | traffic canary: serve the candidate first

Every step that changes something appends an audit entry. After a cycle is decided, a reflection
session may add one lesson. The watch after the write (monitor, guard every 24 h, rollback) is in
``watcher``; the write itself only ever goes through ``writer``.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from lousho.agent.verdict import Check
from lousho.errors import LoushoError
from lousho.improve import audit, corpus, lessons, reflection, traffic, writer
from lousho.improve.cache import Cache, Ledger
from lousho.improve.card import format_improve_result
from lousho.improve.check_module import CheckModule, load_check_module, module_cases
from lousho.improve.controls import RateLimited, kill_switch, refusal
from lousho.improve.corpus import CheckDecision
from lousho.improve.errors import BudgetExceeded
from lousho.improve.harness import Harness, agent_name, read_harness
from lousho.improve.locks import exclusive
from lousho.improve.records import Case
from lousho.improve.result import ImproveResult
from lousho.improve.state import (
    LoopConfig,
    Paths,
    iso,
    load_config,
    load_state,
    now_utc,
    save_state,
    write_json,
)
from lousho.improve.step import build_runner, improve_agent
from lousho.models.config import ModelConfig
from lousho.models.protocol import ModelClient


@dataclass(frozen=True)
class LoopSetup:
    """What every loop action needs: the directory, its check module, the models, the store."""

    agent_dir: Path
    check: str | Path | CheckModule | Check
    model: ModelConfig | None = None
    editor_model: ModelConfig | None = None
    observe: str | None = None
    observe_token: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    editor_client: ModelClient | None = None
    rate_limit: bool = False  # a watcher: editor and reflection calls at most editor_calls_per_minute
    clock: Callable[[], datetime] = now_utc
    progress: Callable[[str], None] | None = None
    # The name the agent's runs carry (gen_ai.agent.name); default: agent.toml's, else the directory's.
    agent_name: str | None = None
    # A PEM certificate to trust when ``observe`` is an https daemon with a self-signed certificate.
    observe_ca_cert: Path | None = None

    @property
    def paths(self) -> Paths:
        return Paths(self.agent_dir)

    @property
    def name(self) -> str:
        return self.agent_name or agent_name(self.agent_dir)


# Errors that end a cycle before its step could judge an edit: the directory, the check module or a model
# was unusable (a bad directory, a model that is down or refuses the key, so no run was scored or every
# editor failed). The regression that started the cycle is still unexamined, so the daemon's trigger tries
# again, with backoff, until the cause is fixed.
NOT_STARTED = frozenset({
    "LOUSHO_AGENT_DIR_INVALID", "LOUSHO_IMPROVE_HARNESS_INVALID", "LOUSHO_IMPROVE_CHECK_INVALID",
    "LOUSHO_IMPROVE_CHECK_RAISED", "LOUSHO_IMPROVE_NO_MODEL", "LOUSHO_IMPROVE_NO_PROBE",
    "LOUSHO_IMPROVE_EDITORS_FAILED",
    "LOUSHO_IMPROVE_PROBE_FAILED", "LOUSHO_MODELS_CONFIG_INVALID", "LOUSHO_PROVIDER_AUTH",
    "LOUSHO_PROVIDER_RATE_LIMIT", "LOUSHO_PROVIDER_TIMEOUT", "LOUSHO_PROVIDER_UNKNOWN",
})


@dataclass(frozen=True)
class CycleResult:
    outcome: str  # refused, paused, kept-base, canary-rejected, applied, rolled-back, queued, traffic, error
    reason: str
    step: ImproveResult | None = None
    proposal_id: str | None = None
    revision: str | None = None
    checks: tuple[CheckDecision, ...] = ()
    tokens: int = 0
    code: str | None = None  # the error's code, for outcome "error"

    @property
    def retry(self) -> bool:
        """Did the cycle fail before its step could judge anything (see NOT_STARTED)? Then retry it."""
        return self.outcome == "error" and self.code in NOT_STARTED

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason": self.reason, "proposal_id": self.proposal_id,
                "revision": self.revision, "checks": [c.to_dict() for c in self.checks], "tokens": self.tokens,
                "code": self.code, "retry": self.retry, "step": self.step.to_dict() if self.step else None}


def run_cycle(setup: LoopSetup, *, force: bool = False) -> CycleResult:
    """One cycle in the configured mode. ``force`` skips the interval and watch checks (never the kill
    switch, budgets or cooldown)."""
    paths = setup.paths
    paths.ensure()
    now = setup.clock()
    config = load_config(paths)
    state = load_state(paths)
    stop = kill_switch(paths, setup.environ)
    if stop:
        return CycleResult("paused", f"kill switch: {stop}")
    why = refusal(config, state, now)
    if why is None and not force and state.watched and state.watched.get("status") in ("monitoring", "traffic"):
        why = f"the edit applied as {state.watched.get('after')} is still under watch"
    if why:
        save_state(paths, state)
        audit.append(paths, "cycle-refused", reason=why)
        return CycleResult("refused", why)
    with exclusive(paths, "cycle", wait=False) as held:
        if not held:
            return CycleResult("refused", "another cycle is running on this directory")
        cycle_id = f"c-{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        state = load_state(paths)
        state.roll_day(now)
        state.cycles_today += 1
        state.last_cycle_at = iso(now)
        save_state(paths, state)
        audit.append(paths, "cycle-start", cycle=cycle_id, mode=config.approval)
        try:
            result = _cycle(setup, paths, config, cycle_id)
        except BudgetExceeded as e:
            result = CycleResult("refused", e.message)
        except LoushoError as e:  # a clear outcome and an audit line for every failure a user can meet
            result = CycleResult("error", f"{e.code}: {e.message}", code=e.code)
        audit.append(paths, "cycle-end", cycle=cycle_id, outcome=result.outcome, reason=result.reason[:500],
                     tokens=result.tokens)
        return result


def _cycle(setup: LoopSetup, paths: Paths, config: LoopConfig, cycle_id: str) -> CycleResult:
    module = load_check_module(setup.check)
    shown = lessons.active(paths)
    remaining = max(config.tokens_per_day - load_state(paths).tokens_today, 0)
    editor = _editor_client(setup, config)
    step = improve_agent(
        setup.agent_dir, module, model=setup.model, editor_model=setup.editor_model, observe=setup.observe,
        observe_token=setup.observe_token, observe_ca_cert=setup.observe_ca_cert,
        recurring_only=config.recurring_only, lessons=[le.text for le in shown],
        quoted_checks=config.quoted_policy, cache_dir=paths.cache, environ=dict(setup.environ),
        editor_client=editor, progress=setup.progress, token_budget=remaining,
        stop_check=lambda: kill_switch(paths, setup.environ), agent_name=setup.name,
    )
    tokens = step.cost.tokens
    _spend(paths, tokens)  # now, so the canary and the guard see what is left of today's budget
    cited = sorted({i for d in step.decisions if d.kind == "editor" for i in lessons.cited(d.reason, shown)})
    if step.error is not None:
        code = step.error["code"]
        outcome = {"LOUSHO_IMPROVE_STOPPED": "paused", "LOUSHO_IMPROVE_BUDGET": "refused"}.get(code, "error")
        audit.append(paths, "step-error", cycle=cycle_id, code=code, reason=step.reason[:500])
        return CycleResult(outcome, step.reason, step, tokens=tokens, code=code)
    if step.outcome == "keep-base":
        audit.append(paths, "kept-base", cycle=cycle_id, reason=step.reason[:500], base=step.base_revision)
        if any(d.kind == "editor" for d in step.decisions):
            tokens += _reflect(setup, config, paths, step, "kept the base: " + step.reason, cycle_id)
        return CycleResult("kept-base", step.reason, step, tokens=tokens)
    base = read_harness(setup.agent_dir)
    if base.revision != step.base_revision:  # someone edited the harness while the editors worked
        audit.append(paths, "write-refused", cycle=cycle_id, reason="stale", expected=step.base_revision,
                     found=base.revision)
        return CycleResult("refused", f"stale: the harness changed to {base.revision} during the cycle (it was "
                                      f"{step.base_revision})", step, tokens=tokens)
    target = _target(base, step)
    protected = [c for c in module_cases(module) if c.protected]
    corpus.add(paths, protected, "protected", base.revision)
    stop = kill_switch(paths, setup.environ)
    if stop:
        audit.append(paths, "paused", cycle=cycle_id, before="canary", reason=stop)
        return CycleResult("paused", f"kill switch before the canary: {stop}", step, tokens=tokens)
    with _runs(setup, module, config) as (run_many, ledger):
        canary = corpus.replay_canary(run_many, target, step.training, corpus.load(paths))
    tokens += ledger.tokens
    audit.append(paths, "canary", cycle=cycle_id, passed=canary.passed, reason=canary.reason,
                 revision=target.revision)
    if not canary.passed:
        tokens += _reflect(setup, config, paths, step, "rejected by the replay canary: " + canary.reason, cycle_id)
        return CycleResult("canary-rejected", canary.reason, step, checks=(canary,), tokens=tokens)
    proposal = _save_proposal(paths, step, base, target, cycle_id, cited)
    if config.approval == "manual":
        audit.append(paths, "queued", cycle=cycle_id, proposal=proposal, revision=target.revision,
                     flags=list(step.flags))
        return CycleResult("queued", f"queued for a person as {proposal}", step, proposal, target.revision,
                           (canary,), tokens)
    state = load_state(paths)
    state.roll_day(setup.clock())
    if state.applies_today >= config.applies_per_day:
        audit.append(paths, "apply-deferred", cycle=cycle_id, proposal=proposal,
                     reason=f"{state.applies_today} applies today, the limit is {config.applies_per_day}")
        return CycleResult("queued", f"auto mode applies at most {config.applies_per_day} a UTC day; saved as "
                                     f"{proposal} for tomorrow or a person", step, proposal, target.revision,
                           (canary,), tokens)
    applied = apply_proposal(setup, proposal, by="auto")
    return replace(applied, step=step, checks=(canary, *applied.checks), tokens=tokens + applied.tokens)


def apply_proposal(setup: LoopSetup, proposal_id: str, *, by: str) -> CycleResult:
    """Write a proposal (auto mode, or a person's approve): refused if stale or by the kill switch; then
    the corpus guard, or the traffic canary first when it is on."""
    paths = setup.paths
    config = load_config(paths)
    data = load_proposal(paths, proposal_id)
    if data["status"] != "pending":
        return CycleResult("refused", f"{proposal_id} is {data['status']}, not pending", proposal_id=proposal_id)
    module = load_check_module(setup.check)
    if module.probe is None and setup.model is None:  # refuse before writing, not after
        return CycleResult("refused", "the corpus guard runs the agent after the write: pass the agent's model "
                                      "(--model-url, --model) or a check module with probe()", proposal_id=proposal_id)
    stop = kill_switch(paths, setup.environ)
    if stop:
        audit.append(paths, "paused", before="write", proposal=proposal_id, reason=stop)
        return CycleResult("paused", f"kill switch before the write: {stop}", proposal_id=proposal_id)
    base = writer.load_revision(paths, data["base"])
    target = writer.load_revision(paths, data["revision"])
    current = read_harness(setup.agent_dir)
    if current.revision != base.revision:
        data["status"] = "stale"
        write_json(paths.proposals / f"{proposal_id}.json", data)
        audit.append(paths, "write-refused", reason="stale", proposal=proposal_id, expected=base.revision,
                     found=current.revision)
        return CycleResult("refused", f"stale: the harness is at {current.revision}, the proposal was made on "
                                      f"{base.revision}", proposal_id=proposal_id)
    if config.traffic_canary:
        traffic.start(paths, base, target, setup.agent_dir, share=config.traffic_share,
                      max_sessions=config.traffic_sessions, proposal_id=proposal_id)
        data["status"] = "traffic"
        write_json(paths.proposals / f"{proposal_id}.json", data)
        _watch(paths, {"status": "traffic", "proposal": proposal_id, "before": base.revision,
                       "after": target.revision, "started_at": iso(setup.clock()), "cited": data["cited"],
                       "fixed": data["helped"]})
        audit.append(paths, "traffic-start", proposal=proposal_id, revision=target.revision, by=by)
        return CycleResult("traffic", "the candidate serves a share of new sessions before a promote",
                           proposal_id=proposal_id, revision=target.revision)
    return _write_and_guard(setup, base, target, data, by)


def promote(setup: LoopSetup, proposal_id: str) -> CycleResult:
    """The traffic canary passed: write the candidate, then guard and monitor it like any apply."""
    paths = setup.paths
    stop = kill_switch(paths, setup.environ)
    if stop:
        audit.append(paths, "paused", before="write", proposal=proposal_id, reason=stop)
        return CycleResult("paused", f"kill switch before the write: {stop}", proposal_id=proposal_id)
    data = load_proposal(paths, proposal_id)
    base = writer.load_revision(paths, data["base"])
    target = writer.load_revision(paths, data["revision"])
    return _write_and_guard(setup, base, target, data, "traffic-canary")


def _write_and_guard(setup: LoopSetup, base: Harness, target: Harness, data: dict[str, Any], by: str) -> CycleResult:
    paths = setup.paths
    proposal_id = data["id"]
    try:
        written = writer.write(paths, target, expected=base.revision, action="apply", proposal=proposal_id, by=by)
    except (writer.StaleHarness, writer.WriteRefused) as e:
        data["status"] = "stale" if isinstance(e, writer.StaleHarness) else "refused"
        write_json(paths.proposals / f"{proposal_id}.json", data)
        return CycleResult("refused", e.message, proposal_id=proposal_id)
    data["status"] = "applied"
    write_json(paths.proposals / f"{proposal_id}.json", data)
    state = load_state(paths)
    state.roll_day(setup.clock())
    state.applies_today += 1
    save_state(paths, state)
    fixed = [Case(id=c["id"], input=c["input"]) for c in data["training"] if c["id"] in data["helped"]]
    corpus.add(paths, fixed, "fixed", target.revision)
    _watch(paths, {"status": "monitoring", "proposal": proposal_id, "before": written.before,
                   "after": written.after, "applied_at": iso(setup.clock()), "cited": data["cited"],
                   "fixed": data["helped"]})
    guard, tokens = run_guard(setup)
    if not guard.passed:
        rolled = rollback(setup, reason=f"corpus guard: {guard.reason}")
        return CycleResult("rolled-back", f"applied {written.after}, then the corpus guard rolled it back: "
                                          f"{guard.reason}", proposal_id=proposal_id, revision=rolled.revision,
                           checks=(guard,), tokens=tokens)
    return CycleResult("applied", f"applied {written.after} ({by}); the corpus guard passed; the monitor watches "
                                  "it on live runs", proposal_id=proposal_id, revision=written.after,
                       checks=(guard,), tokens=tokens)


def run_guard(setup: LoopSetup) -> tuple[CheckDecision, int]:
    """The corpus guard on the watched edit: its revision against the one before; audited."""
    paths = setup.paths
    state = load_state(paths)
    watched = state.watched or {}
    module = load_check_module(setup.check)
    config = load_config(paths)
    before = writer.load_revision(paths, watched["before"])
    after = read_harness(setup.agent_dir)
    with _runs(setup, module, config) as (run_many, ledger):
        try:
            guard = corpus.corpus_guard(run_many, before, after, corpus.load(paths))
        except BudgetExceeded as e:
            guard = CheckDecision("guard", False, f"cannot judge: {e.message}")
    tokens = ledger.tokens
    state = load_state(paths)
    state.last_guard_at = iso(setup.clock())
    save_state(paths, state)
    audit.append(paths, "guard", passed=guard.passed, reason=guard.reason, revision=after.revision)
    return guard, tokens


def rollback(setup: LoopSetup, *, to: str | None = None, reason: str) -> CycleResult:
    """Restore a saved revision (the watched edit's base by default) through the writer; 24 h cooldown;
    the cited lessons get a hurt vote."""
    paths = setup.paths
    config = load_config(paths)
    state = load_state(paths)
    watched = state.watched or {}
    target_rev = to or watched.get("before")
    if not target_rev:
        raise writer.RevisionMissing("nothing to roll back to: no applied edit is watched; pass --to REV")
    target = writer.load_revision(paths, target_rev)
    current = read_harness(setup.agent_dir)
    undoing_watched = to is None and watched.get("status") in ("monitoring", "traffic")
    # An automatic rollback undoes the watched edit only: if a person changed the harness since, it is stale.
    expected = str(watched["after"]) if to is None and watched.get("after") else current.revision
    # The watched edit's base was the live harness before; any other saved revision is checked again.
    written = writer.write(paths, target, expected=expected, action="rollback", reason=reason,
                           check_injection=to is not None)
    now = setup.clock()
    state = load_state(paths)
    state.cooldown_until = iso(now + timedelta(hours=config.cooldown_hours))
    if state.watched and undoing_watched:
        state.watched = {**state.watched, "status": "rolled-back", "rolled_back_at": iso(now), "reason": reason}
        retired = lessons.vote(paths, state.watched.get("cited", []), helped=False, at=now)
        for lesson in retired:
            audit.append(paths, "lesson-retired", lesson=lesson.id)
    save_state(paths, state)
    audit.append(paths, "cooldown", until=state.cooldown_until)
    if undoing_watched:
        _reflect_on(setup, config, state.watched or {}, f"rolled back: {reason}")
    return CycleResult("rolled-back", reason, revision=written.after)


def keep(setup: LoopSetup, outcome: str, reason: str) -> None:
    """The monitor kept the watched edit (``kept`` or ``kept-unverified``): helped votes for its lessons."""
    paths = setup.paths
    state = load_state(paths)
    if not state.watched:
        return
    state.watched = {**state.watched, "status": outcome, "decided_at": iso(setup.clock()), "reason": reason}
    save_state(paths, state)
    if outcome == "kept":
        lessons.vote(paths, state.watched.get("cited", []), helped=True)
    audit.append(paths, outcome, revision=state.watched.get("after"), reason=reason)
    _reflect_on(setup, load_config(paths), state.watched, f"{outcome}: {reason}")


def force_apply(setup: LoopSetup, target: Harness, *, reason: str) -> CycleResult:
    """A person's write without the gate (the escape hatch, and how a benchmark plants harm). It goes
    through the writer like any apply and is watched like one: the guard and the monitor can undo it."""
    paths = setup.paths
    current = read_harness(setup.agent_dir)
    written = writer.write(paths, target, expected=current.revision, action="apply", by="force", reason=reason)
    _watch(paths, {"status": "monitoring", "proposal": None, "before": written.before, "after": written.after,
                   "applied_at": iso(setup.clock()), "cited": [], "fixed": []})
    return CycleResult("applied", f"forced {written.after}: {reason}", revision=written.after)


# --- proposals (manual mode's queue) ---


def load_proposal(paths: Paths, proposal_id: str) -> dict[str, Any]:
    import json

    path = paths.proposals / f"{proposal_id}.json"
    if not path.exists() or "/" in proposal_id or proposal_id.startswith("."):
        raise ProposalNotFound(f"no proposal {proposal_id!r} in {paths.proposals}")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def list_proposals(paths: Paths) -> list[dict[str, Any]]:
    if not paths.proposals.is_dir():
        return []
    return [load_proposal(paths, p.stem) for p in sorted(paths.proposals.glob("*.json"))]


def reject_proposal(setup: LoopSetup, proposal_id: str) -> CycleResult:
    paths = setup.paths
    data = load_proposal(paths, proposal_id)
    if data["status"] != "pending":
        return CycleResult("refused", f"{proposal_id} is {data['status']}, not pending", proposal_id=proposal_id)
    data["status"] = "rejected"
    write_json(paths.proposals / f"{proposal_id}.json", data)
    audit.append(paths, "reject", proposal=proposal_id)
    return CycleResult("rejected", f"{proposal_id} rejected; nothing written", proposal_id=proposal_id)


class ProposalNotFound(writer.RevisionMissing):
    code = "LOUSHO_IMPROVE_PROPOSAL_NOT_FOUND"
    hint = "`lousho improve status DIR` lists the proposals"


def _save_proposal(paths: Paths, step: ImproveResult, base: Harness, target: Harness, cycle_id: str,
                   cited: list[str]) -> str:
    writer.save_revision(paths, base)
    writer.save_revision(paths, target)
    proposal_id = f"p-{cycle_id[2:]}"
    write_json(paths.proposals / f"{proposal_id}.json", {
        "id": proposal_id, "cycle": cycle_id, "status": "pending", "base": base.revision,
        "revision": target.revision, "diff": step.diff, "card": format_improve_result(step),
        "flags": list(step.flags), "created_at": iso(now_utc()), "cited": cited, "helped": list(step.helped),
        "training": [{"id": c.id, "input": c.input} for c in step.training],
    })
    return proposal_id


def _target(base: Harness, step: ImproveResult) -> Harness:
    target = base
    for path, text in sorted(step.files.items()):
        target = target.with_file(path, text)
    return target


def _watch(paths: Paths, watched: dict[str, Any]) -> None:
    state = load_state(paths)
    state.watched = watched
    state.last_guard_at = None
    save_state(paths, state)


def _spend(paths: Paths, tokens: int) -> None:
    if tokens:
        state = load_state(paths)
        state.tokens_today += tokens
        save_state(paths, state)


def _editor_client(setup: LoopSetup, config: LoopConfig) -> ModelClient | None:
    client = setup.editor_client
    if client is None and (setup.editor_model or setup.model) is not None:
        client = (setup.editor_model or setup.model).client(setup.environ)  # type: ignore[union-attr]
    if client is not None and setup.rate_limit:
        client = RateLimited(client, config.editor_calls_per_minute)
    return client


class _runs:  # noqa: N801 (a context manager used like a function)
    """A runner with its own throwaway directory and a ledger bounded by what is left of today's tokens;
    what it spent is recorded when the block ends, also when it ends by an exception."""

    def __init__(self, setup: LoopSetup, module: CheckModule, config: LoopConfig) -> None:
        self.setup, self.module = setup, module
        state = load_state(setup.paths)
        state.roll_day(setup.clock())
        self.ledger = Ledger(token_limit=max(config.tokens_per_day - state.tokens_today, 0))

    def __enter__(self) -> tuple[Any, Ledger]:
        self._tmp = tempfile.TemporaryDirectory(prefix="lousho-loop-")
        runner = build_runner(self.setup.agent_dir, self.module, self.setup.model, self.setup.environ,
                              Path(self._tmp.name), Cache(None), self.ledger)
        return runner.run_many, self.ledger

    def __exit__(self, *exc: object) -> None:
        self._tmp.cleanup()
        _spend(self.setup.paths, self.ledger.tokens)


def _reflect_on(setup: LoopSetup, config: LoopConfig, watched: dict[str, Any], outcome: str) -> None:
    """Reflection once an applied edit is decided (kept or rolled back): from its proposal's card and diff."""
    proposal = watched.get("proposal")
    client = _editor_client(setup, config)
    if not proposal or client is None or kill_switch(setup.paths, setup.environ):
        return
    try:
        data = load_proposal(setup.paths, str(proposal))
    except ProposalNotFound:
        return
    names = [c.get("failed_check") for c in data.get("training", []) if c.get("failed_check")]
    result = reflection.reflect(client, card=data.get("card", ""), diff=data.get("diff", ""), verdicts=[],
                                outcome=outcome, failed_checks=names)
    _spend(setup.paths, result.tokens)
    if result.lesson:
        added = lessons.add(setup.paths, result.lesson, cycle=str(data.get("cycle", "")), failed_checks=names)
        if isinstance(added, str):
            audit.append(setup.paths, "lesson-refused", proposal=proposal, reason=added)
        else:
            audit.append(setup.paths, "lesson", proposal=proposal, lesson=added.id, text=added.text)


def _reflect(setup: LoopSetup, config: LoopConfig, paths: Paths, step: ImproveResult, outcome: str,
             cycle_id: str) -> int:
    """At most one lesson from a decided cycle: the card, diff, verdicts and outcome, never a transcript."""
    client = _editor_client(setup, config)
    if client is None or kill_switch(paths, setup.environ):
        return 0
    verdicts = [(row["label"], f"{row['verdict']}: {row['base']} -> {row['candidate']} of {row['runs']} ({d.subject})")
                for d in step.decisions if d.kind == "gate" for row in d.evidence.get("rows", [])]
    names = sorted({n for c in step.training for n in c.failed_checks})
    names += [d.reason.split("'")[1] for d in step.decisions if d.kind == "quoted-check" and "'" in d.reason]
    result = reflection.reflect(client, card=format_improve_result(step), diff=step.diff, verdicts=verdicts,
                                outcome=outcome, failed_checks=names)
    _spend(paths, result.tokens)
    if result.lesson:
        added = lessons.add(paths, result.lesson, cycle=cycle_id, failed_checks=names)
        if isinstance(added, str):
            audit.append(paths, "lesson-refused", cycle=cycle_id, reason=added)
        else:
            audit.append(paths, "lesson", cycle=cycle_id, lesson=added.id, text=added.text)
    return 0  # spent above
