"""One cycle of the self-healing loop (seed §4.1, §4.2): step, canary, then apply or queue; and every
other change the loop makes to the harness or the watched edit.

    kill switch, budgets, cooldown -> cases (auto: recurring failures only) -> improve step
    -> replay canary -> auto: write (1 a UTC day), corpus guard, watch | manual: queue for a person
    (-> approve: write if not stale, guard, watch) | traffic canary: serve the candidate first

Every step that changes something appends an audit entry. After a cycle or an applied edit is decided,
a reflection session may add one lesson (``learn``). The ``watcher`` decides, tick by tick, what
happens to the watched edit (guard, rollback, keep, promote, retire); the functions here carry it out.
The write itself only ever goes through ``writer``. Every write the loop watches starts the monitor's
holdback (``traffic.start_holdback``: the base keeps a share of new sessions) unless ``holdback`` is 0 or a
canary runs; whatever ends the watch (keep, rollback, expiry, a person's change, a new edit) ends it.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from lousho.improve import audit, journal, learn, lessons, proposals, traffic, writer
from lousho.improve.check_module import load_check_module, module_cases
from lousho.improve.controls import kill_switch, refusal
from lousho.improve.errors import BudgetExceeded
from lousho.improve.harness import Harness, read_harness
from lousho.improve.locks import exclusive
from lousho.improve.loop_setup import CycleResult, LoopRuns, LoopSetup, editor_client, spend
from lousho.improve.records import Case
from lousho.improve.result import ImproveResult
from lousho.improve.state import (
    LoopConfig,
    LoopState,
    Paths,
    WatchedEdit,
    iso,
    load_config,
    load_state,
    now_utc,
    parse_iso,
    update,
)
from lousho.kernel.errors import LoushoError

# The corpus, the step and the gate they use pull in SciPy (0.4 s): they are imported by the functions that run
# the agent, so a person's reject or rollback starts in a fraction of that.
if TYPE_CHECKING:
    from lousho.improve.corpus import CheckDecision


def run_cycle(setup: LoopSetup, *, force: bool = False) -> CycleResult:
    """One cycle in the configured mode. ``force`` skips the interval and watch checks (never the kill
    switch, budgets or cooldown)."""
    paths = setup.paths
    paths.ensure()
    journal.recover(paths)  # an apply a crash cut short is undone before the cycle reads the harness
    resume_recording(setup)  # and a committed write whose record it cut short is recorded
    now = setup.clock()
    config = load_config(paths)
    state = load_state(paths)
    stop = kill_switch(paths, setup.environ)
    if stop:
        return CycleResult("paused", f"kill switch: {stop}")
    why = refusal(config, state, now)
    if why is None and not force and state.watched and state.watched.under_watch:
        why = f"the edit applied as {state.watched.after} is still under watch"
    if why:
        update(paths, lambda s: s.roll_day(now))
        audit.append(paths, "cycle-refused", reason=why)
        return CycleResult("refused", why)
    with exclusive(paths, "cycle", wait=False) as held:
        if not held:
            return CycleResult("refused", "another cycle is running on this directory")
        cycle_id = f"c-{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"

        def start(s: LoopState) -> None:
            s.roll_day(now)
            s.cycles_today += 1
            s.last_cycle_at = iso(now)

        update(paths, start)
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
    from lousho.improve import corpus
    from lousho.improve.step import improve_agent

    module = load_check_module(setup.check)
    shown = lessons.active(paths)
    remaining = max(config.tokens_per_day - load_state(paths).tokens_today, 0)
    step = improve_agent(
        setup.agent_dir, module, setup.step_options(config, remaining), lessons=[le.text for le in shown],
        environ=dict(setup.environ), editor_client=editor_client(setup, config), progress=setup.progress,
        stop_check=lambda: kill_switch(paths, setup.environ),
    )
    tokens = step.cost.tokens
    spend(paths, tokens)  # now, so the canary and the guard see what is left of today's budget
    cited = sorted({i for d in step.decisions if d.kind == "editor" for i in lessons.cited(d.reason, shown)})
    if step.error is not None:
        code = step.error["code"]
        outcome = {"LOUSHO_IMPROVE_STOPPED": "paused", "LOUSHO_IMPROVE_BUDGET": "refused"}.get(code, "error")
        audit.append(paths, "step-error", cycle=cycle_id, code=code, reason=step.reason[:500])
        return CycleResult(outcome, step.reason, step, tokens=tokens, code=code)
    if step.outcome == "keep-base":
        audit.append(paths, "kept-base", cycle=cycle_id, reason=step.reason[:500], base=step.base_revision)
        if any(d.kind == "editor" for d in step.decisions):
            tokens += learn.after_cycle(setup, config, step, "kept the base: " + step.reason, cycle_id)
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
    with LoopRuns(setup, module, config) as (run_many, ledger):
        canary = corpus.replay_canary(run_many, target, step.training, corpus.load(paths))
    tokens += ledger.tokens
    audit.append(paths, "canary", cycle=cycle_id, passed=canary.passed, reason=canary.reason,
                 revision=target.revision)
    if not canary.passed:
        tokens += learn.after_cycle(setup, config, step, "rejected by the replay canary: " + canary.reason, cycle_id)
        return CycleResult("canary-rejected", canary.reason, step, checks=(canary,), tokens=tokens)
    proposal = proposals.save(paths, step, base, target, cycle_id, cited)
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
    data = proposals.load(paths, proposal_id)
    if data["status"] != "pending":
        return CycleResult("refused", f"{proposal_id} is {data['status']}, not pending", proposal_id=proposal_id)
    module = load_check_module(setup.check)
    if module.probe is None and setup.options.model is None:  # refuse before writing, not after
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
        proposals.set_status(paths, proposal_id, "stale")
        audit.append(paths, "write-refused", reason="stale", proposal=proposal_id, expected=base.revision,
                     found=current.revision)
        return CycleResult("refused", f"stale: the harness is at {current.revision}, the proposal was made on "
                                      f"{base.revision}", proposal_id=proposal_id)
    if config.traffic_canary:
        _end_holdback(paths, f"the traffic canary of {target.revision} replaces the watch")
        traffic.start(paths, base, target, setup.agent_dir, share=config.traffic_share,
                      max_sessions=config.traffic_sessions, proposal_id=proposal_id)
        proposals.set_status(paths, proposal_id, "traffic")
        _watch(paths, WatchedEdit("traffic", base.revision, target.revision, proposal_id, tuple(data["cited"]),
                                  tuple(data["helped"]), started_at=iso(setup.clock())))
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
    data = proposals.load(paths, proposal_id)
    base = writer.load_revision(paths, data["base"])
    target = writer.load_revision(paths, data["revision"])
    return _write_and_guard(setup, base, target, data, "traffic-canary")


def _write_and_guard(setup: LoopSetup, base: Harness, target: Harness, data: dict[str, Any], by: str) -> CycleResult:
    paths = setup.paths
    proposal_id = data["id"]
    with exclusive(paths, RECORD):  # the write and its record, as one for resume_recording
        try:
            written = writer.write(paths, target, expected=base.revision, action="apply", proposal=proposal_id,
                                   by=by)
        except (writer.StaleHarness, writer.WriteRefused) as e:
            proposals.set_status(paths, proposal_id, "stale" if isinstance(e, writer.StaleHarness) else "refused")
            return CycleResult("refused", e.message, proposal_id=proposal_id)
        _record_apply(setup, base, target, data)
    guard, tokens = run_guard(setup)
    if not guard.passed:
        rolled = rollback(setup, reason=f"corpus guard: {guard.reason}")
        return CycleResult("rolled-back", f"applied {written.after}, then the corpus guard rolled it back: "
                                          f"{guard.reason}", proposal_id=proposal_id, revision=rolled.revision,
                           checks=(guard,), tokens=tokens)
    return CycleResult("applied", f"applied {written.after} ({by}); the corpus guard passed; the monitor watches "
                                  "it on live runs", proposal_id=proposal_id, revision=written.after,
                       checks=(guard,), tokens=tokens)


def _record_apply(setup: LoopSetup, base: Harness, target: Harness, data: dict[str, Any] | None) -> None:
    """What follows from a written apply: the proposal applied, the day's count, its fixed cases in the corpus,
    the holdback and the watch."""
    paths = setup.paths
    proposal_id = data["id"] if data else None
    if data is not None and data["status"] in ("pending", "traffic"):
        proposals.set_status(paths, data["id"], "applied")

    def count(s: LoopState) -> None:
        s.roll_day(setup.clock())
        s.applies_today += 1

    update(paths, count)
    if data is not None:
        from lousho.improve import corpus

        fixed = [Case(id=c["id"], input=c["input"]) for c in data["training"] if c["id"] in data["helped"]]
        corpus.add(paths, fixed, "fixed", target.revision)
    applied_at = iso(setup.clock())
    design = _hold_back(setup, base, target, proposal_id)
    _watch(paths, WatchedEdit("monitoring", base.revision, target.revision, proposal_id,
                              tuple(data["cited"]) if data else (), tuple(data["helped"]) if data else (),
                              applied_at=applied_at, **design))


# Held from a write through its record (the watch, the cooldown); resume_recording takes it to tell a record
# cut short by a crash from one another process is making right now.
RECORD = "record"


def resume_recording(setup: LoopSetup) -> str | None:
    """Finish the record of a write a crash cut short after its commit line (``apply``/``rollback``) but before
    the loop recorded what follows: an applied edit nobody watches gets its watch (guard, monitor, holdback), a
    rollback without its ``cooldown`` line gets its cooldown. Run before a tick or a cycle reads the state; what
    it did, or None."""
    paths = setup.paths
    with exclusive(paths, RECORD):
        last = _last_write(paths)
        try:
            current = read_harness(setup.agent_dir).revision if last is not None else None
        except LoushoError:  # no harness to read: the cycle or the tick reports that on its own
            return None
        if last is None or current != last.get("after"):
            return None  # nothing written yet, or the harness moved on since (supersede handles a person's edit)
        watched = load_state(paths).watched
        if last["action"] == "apply":
            if watched is not None and watched.after == last["after"] and watched.status != "traffic":
                return None
            data = _proposal_or_none(paths, last.get("proposal"))
            _record_apply(setup, writer.load_revision(paths, str(last["before"])),
                          writer.load_revision(paths, str(last["after"])), data)
            why = f"the apply of {last['after']} (audit line {last['seq']}) was cut short before it was watched"
            audit.append(paths, "apply-resumed", write=last["seq"], revision=last["after"], reason=why)
            return why
        if last.get("cooled"):
            return None
        why = f"the rollback to {last['after']} (audit line {last['seq']}) was cut short before its cooldown"
        _record_rollback(setup, undoing_watched=watched is not None and watched.under_watch
                         and watched.after == last.get("before"), reason=why, write=last["seq"])
        return why


def _last_write(paths: Paths) -> dict[str, Any] | None:
    """The last ``apply`` or ``rollback`` line; a rollback's gets ``cooled`` when a ``cooldown`` line follows it."""
    last: dict[str, Any] | None = None
    for _, entry in audit.numbered_entries(paths):
        if entry is None:
            continue
        if entry.get("action") in ("apply", "rollback"):
            last = dict(entry)
        elif entry.get("action") == "cooldown" and last is not None:
            last["cooled"] = True
    return last


def _proposal_or_none(paths: Paths, proposal_id: object) -> dict[str, Any] | None:
    if not isinstance(proposal_id, str):
        return None
    try:
        return proposals.load(paths, proposal_id)
    except LoushoError:
        return None


def run_guard(setup: LoopSetup) -> tuple[CheckDecision, int]:
    """The corpus guard on the watched edit: its revision against the one before; audited."""
    from lousho.improve import corpus
    from lousho.improve.corpus import CheckDecision

    paths = setup.paths
    watched = load_state(paths).watched
    if watched is None:
        raise writer.RevisionMissing("no applied edit is watched: the corpus guard has nothing to judge")
    module = load_check_module(setup.check)
    config = load_config(paths)
    before = writer.load_revision(paths, watched.before)
    after = read_harness(setup.agent_dir)
    with LoopRuns(setup, module, config) as (run_many, ledger):
        try:
            guard = corpus.corpus_guard(run_many, before, after, corpus.load(paths))
        except BudgetExceeded as e:
            guard = CheckDecision("guard", False, f"cannot judge: {e.message}")
    guarded_at = iso(setup.clock())

    def record(s: LoopState) -> None:
        s.last_guard_at = guarded_at

    update(paths, record)
    audit.append(paths, "guard", passed=guard.passed, reason=guard.reason, revision=after.revision)
    return guard, ledger.tokens


def rollback(setup: LoopSetup, *, to: str | None = None, reason: str) -> CycleResult:
    """Restore a saved revision (the watched edit's base by default) through the writer; 24 h cooldown;
    the cited lessons get a hurt vote."""
    paths = setup.paths
    config = load_config(paths)
    watched = load_state(paths).watched
    target_rev = to or (watched.before if watched else None)
    if not target_rev:
        raise writer.RevisionMissing("nothing to roll back to: no applied edit is watched; pass --to REV")
    target = writer.load_revision(paths, target_rev)
    current = read_harness(setup.agent_dir)
    undoing_watched = to is None and watched is not None and watched.under_watch
    # An automatic rollback undoes the watched edit only: if a person changed the harness since, it is stale.
    expected = watched.after if to is None and watched is not None else current.revision
    # The watched edit's base was the live harness before; any other saved revision is checked again.
    with exclusive(paths, RECORD):  # the write and its record, as one for resume_recording
        written = writer.write(paths, target, expected=expected, action="rollback", reason=reason,
                               check_injection=to is not None)
        state = _record_rollback(setup, undoing_watched=undoing_watched, reason=reason)
    if state.watched and undoing_watched:
        learn.after_edit(setup, config, state.watched, f"rolled back: {reason}")
    return CycleResult("rolled-back", reason, revision=written.after)


def _record_rollback(setup: LoopSetup, *, undoing_watched: bool, reason: str, **fields: Any) -> LoopState:
    """What follows from a written rollback: the cooldown, the watched edit rolled back with hurt votes for its
    lessons, the holdback ended; the ``cooldown`` line closes it."""
    paths = setup.paths
    config = load_config(paths)
    now = setup.clock()

    def record(s: LoopState) -> None:
        s.cooldown_until = iso(now + timedelta(hours=config.cooldown_hours))
        if s.watched and undoing_watched:
            s.watched = s.watched.decided("rolled-back", reason, rolled_back_at=iso(now))

    state = update(paths, record)
    # The base is the directory's harness again (or a person chose another revision): the split means nothing.
    _end_holdback(paths, f"rolled back: {reason}")
    if state.watched and undoing_watched:
        for lesson in lessons.vote(paths, list(state.watched.cited), helped=False, at=now):
            audit.append(paths, "lesson-retired", lesson=lesson.id)
    audit.append(paths, "cooldown", until=state.cooldown_until, **fields)
    return state


def keep(setup: LoopSetup, outcome: Literal["kept", "kept-unverified"], reason: str) -> None:
    """The monitor kept the watched edit (``kept`` or ``kept-unverified``): helped votes for its lessons."""
    paths = setup.paths
    decided_at = iso(setup.clock())

    def record(s: LoopState) -> None:
        if s.watched:
            s.watched = s.watched.decided(outcome, reason, decided_at=decided_at)

    watched = update(paths, record).watched
    if not watched:
        _end_holdback(paths, f"{outcome}: {reason}")
        return
    if outcome == "kept":
        lessons.vote(paths, list(watched.cited), helped=True)
    audit.append(paths, outcome, revision=watched.after, reason=reason)
    _end_holdback(paths, f"{outcome}: {reason}")
    learn.after_edit(setup, load_config(paths), watched, f"{outcome}: {reason}")


def settle(setup: LoopSetup, decision: Literal["rollback", "keep", "kept-unverified"], reason: str,
           evidence: dict[str, Any] | None = None) -> None:
    """The monitor's verdict on the watched edit, carried out: audited with its evidence, then the edit is
    rolled back or kept."""
    audit.append(setup.paths, "monitor", decision=decision, reason=reason, **(evidence or {}))
    if decision == "rollback":
        rollback(setup, reason=f"monitor: {reason}")
    else:
        keep(setup, "kept" if decision == "keep" else "kept-unverified", reason)


def supersede(setup: LoopSetup, current: str) -> None:
    """A person changed the harness since the watched edit was written: it is no longer live."""
    reason = f"the harness is now {current}"

    def record(s: LoopState) -> None:
        if s.watched:
            s.watched = s.watched.decided("superseded", reason)

    watched = update(setup.paths, record).watched
    audit.append(setup.paths, "superseded", revision=watched.after if watched else None, found=current)
    _end_holdback(setup.paths, f"superseded: {reason}")


# A holdback this young may be one whose watch another process (a person's approve) is recording right now.
ORPHAN_GRACE = timedelta(minutes=1)


def end_orphan_holdback(setup: LoopSetup) -> None:
    """End a holdback no watched edit accounts for (a crash between its start and the watch record, a state
    file restored by hand): the base must not keep a share of sessions for an edit nobody watches."""
    paths = setup.paths
    running = traffic.running_holdback(paths)
    if running is None or now_utc() - parse_iso(running["started_at"]) < ORPHAN_GRACE:  # started_at: real time
        return
    watched = load_state(paths).watched
    if watched is None or watched.status != "monitoring" or watched.after != running["candidate_revision"]:
        _end_holdback(paths, "no edit under watch holds it")


def fall_back(setup: LoopSetup, design: str, reason: str) -> None:
    """The monitor ran the watched edit in another design than the one recorded (no held-back run came: the
    agent does not route): record it, audited, and end the holdback nobody uses."""
    paths = setup.paths

    def record(s: LoopState) -> None:
        if s.watched:
            s.watched = replace(s.watched, design=design, design_reason=reason)

    watched = update(paths, record).watched
    audit.append(paths, "monitor-design", design=design, reason=reason, revision=watched.after if watched else None)
    _end_holdback(paths, f"the monitor runs {design}: {reason}")


def finish_traffic(setup: LoopSetup, watched: WatchedEdit, action: Literal["promote", "retire"],
                   reason: str) -> CycleResult:
    """The traffic canary's verdict, carried out: retire the candidate, or promote it (write, guard, watch);
    a promote that is refused (stale, paused) ends the watch as promote-refused."""
    paths = setup.paths
    traffic.finish(paths, action)
    audit.append(paths, f"traffic-{action}", reason=reason, proposal=watched.proposal)
    proposal = watched.proposal or ""
    if action == "retire":
        proposals.set_status(paths, proposal, "retired")
        _set_watched(paths, watched.decided("retired", reason))
        return CycleResult("retired", reason, proposal_id=proposal)
    result = promote(setup, proposal)
    if result.outcome not in ("applied", "rolled-back"):  # refused (stale) or paused: stop watching it
        _set_watched(paths, watched.decided("promote-refused", result.reason))
    return result


def force_apply(setup: LoopSetup, target: Harness, *, reason: str) -> CycleResult:
    """A person's write without the gate (the escape hatch, and how a benchmark plants harm). It goes
    through the writer like any apply and is watched like one: the guard and the monitor can undo it."""
    paths = setup.paths
    current = read_harness(setup.agent_dir)
    with exclusive(paths, RECORD):
        written = writer.write(paths, target, expected=current.revision, action="apply", by="force", reason=reason)
        applied_at = iso(setup.clock())
        design = _hold_back(setup, current, target, None)
        _watch(paths, WatchedEdit("monitoring", written.before, written.after, applied_at=applied_at, **design))
    return CycleResult("applied", f"forced {written.after}: {reason}", revision=written.after)


def reject_proposal(setup: LoopSetup, proposal_id: str) -> CycleResult:
    paths = setup.paths
    data = proposals.load(paths, proposal_id)
    if data["status"] != "pending":
        return CycleResult("refused", f"{proposal_id} is {data['status']}, not pending", proposal_id=proposal_id)
    proposals.set_status(paths, proposal_id, "rejected")
    audit.append(paths, "reject", proposal=proposal_id)
    return CycleResult("rejected", f"{proposal_id} rejected; nothing written", proposal_id=proposal_id)


def _target(base: Harness, step: ImproveResult) -> Harness:
    target = base
    for path, text in sorted(step.files.items()):
        target = target.with_file(path, text)
    return target


def _hold_back(setup: LoopSetup, base: Harness, applied: Harness, proposal_id: str | None) -> dict[str, Any]:
    """Right after a write: start the monitor's holdback (the base keeps a share of new sessions) unless it is
    off or a canary runs; audited either way. The watched edit's design fields, for ``WatchedEdit``."""
    paths = setup.paths
    config = load_config(paths)
    _end_holdback(paths, f"a new edit {applied.revision} was applied")  # one watch, one holdback
    running = traffic.status(paths)
    if not config.holdback:
        why = "no holdback: off in improve.json (holdback 0)"
    elif running is not None and running["status"] == traffic.RUNNING:
        why = f"no holdback: a traffic canary of {running.get('candidate_revision')} is running"
    else:
        try:
            traffic.start_holdback(paths, base, applied, setup.agent_dir, share=config.holdback,
                                   proposal_id=proposal_id)
        except (LoushoError, OSError) as e:  # the edit is written: it is watched, stratified, whatever failed here
            why = f"no holdback: {getattr(e, 'message', None) or e}"
        else:
            why = f"{config.holdback:.0%} of new sessions held back on the base {base.revision}"
            audit.append(paths, "holdback-start", design="concurrent", share=config.holdback, base=base.revision,
                         revision=applied.revision, proposal=proposal_id)
            return {"design": "concurrent", "holdback": config.holdback, "design_reason": why}
    audit.append(paths, "holdback-skipped", design="stratified", reason=why, base=base.revision,
                 revision=applied.revision, proposal=proposal_id)
    return {"design": "stratified", "holdback": None, "design_reason": why}


def _end_holdback(paths: Paths, reason: str) -> None:
    ended = traffic.end_holdback(paths, reason)
    if ended is not None:
        audit.append(paths, "holdback-end", reason=reason[:500], base=ended["base_revision"],
                     revision=ended["candidate_revision"])


def _watch(paths: Paths, watched: WatchedEdit) -> None:
    """Start watching a new edit: the guard is due at once."""
    def record(s: LoopState) -> None:
        s.watched = watched
        s.last_guard_at = None

    update(paths, record)


def _set_watched(paths: Paths, watched: WatchedEdit) -> None:
    def record(s: LoopState) -> None:
        s.watched = watched

    update(paths, record)
