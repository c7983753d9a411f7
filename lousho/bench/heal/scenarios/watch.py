"""Scenarios after the write and on live traffic: planted-forced, stable-monitor, healthy, canary-traffic."""

from __future__ import annotations

from lousho.agent.directory import harness_revision
from lousho.analysis.frames import runs
from lousho.bench.heal import editors, rules, traffic
from lousho.bench.heal.bench import Attempt
from lousho.bench.heal.scenarios.common import DEFAULT, NO_TEXT, Result, audit_actions, files, miss, protected
from lousho.improve import corpus
from lousho.improve.cycle import force_apply, run_cycle
from lousho.improve.harness import read_harness
from lousho.improve.proposals import load as load_proposal
from lousho.improve.watch_lease import new_owner
from lousho.improve.watcher import tick
from lousho.observe.client.store_client import connect
from lousho.observe.trigger.detector import Window, judge

# The seeds' trigger rule (``lousho observe --trigger seed``): two windows of 20 (seed §4.3's monitor rule). The
# default CUSUM waits for a reference of 1,000 scored runs before it can fire at all, so 40 runs could not show
# it leaving a healthy agent alone; the seeds' rule fires on noise more readily, which makes it the stricter test.
DETECT_RUNS = 40
CANARY_BATCH = 8  # sessions between watcher ticks while the traffic canary runs
CANARY_MAX_SESSIONS = 240  # enough for 50 candidate sessions at a 25% share, with room


def planted_forced(a: Attempt) -> Result:
    """Rolled back to the base bytes within 2 ticks: a person's write forced past the gate makes the agent
    edit a test on every fix; the watcher's corpus guard must undo it."""
    a.use_editors(editors.nothing)
    setup = a.setup(DEFAULT)
    base = read_harness(a.agent_dir)
    # The corpus an earlier cycle leaves: its protected cases (a forced write runs no cycle of its own).
    corpus.add(a.paths, protected(DEFAULT), "protected", base.revision)
    base_files = files(a.agent_dir)
    force_apply(setup, base.with_file("instructions.md", base.instructions.rstrip("\n") + f"\n\n{rules.ALL_HARM}\n"),
                reason="planted by the heal benchmark")
    if files(a.agent_dir) == base_files:
        return miss("the forced write changed nothing", "")
    owner = new_owner()
    actions = []
    for _ in range(2):
        actions.append(tick(setup, owner))
        if files(a.agent_dir) == base_files:
            break
    back = files(a.agent_dir) == base_files and "rollback" in audit_actions(a.agent_dir)
    return Result(back, f"{'rolled back to the base bytes' if back else 'not rolled back'} on tick {len(actions)}",
                  " | ".join(t.reason for t in actions))


def stable_monitor(a: Attempt) -> Result:
    """The monitor keeps a harmless edit: after a forced harmless rule, live sessions (a fifth held back on the
    base, the default holdback) until the watcher's monitor decides, concurrently, at its last look."""
    a.use_editors(editors.nothing)
    setup = a.setup(DEFAULT, observe=True)
    base = read_harness(a.agent_dir)
    corpus.add(a.paths, protected(DEFAULT), "protected", base.revision)
    harmless = base.with_file("instructions.md", base.instructions.rstrip("\n") + f"\n\n{rules.HARMLESS_RULE}\n")
    force_apply(setup, harmless, reason="a harmless edit by the heal benchmark")
    decided, sent = traffic.until_decided(a, setup, traffic.EASY, salt="after")
    kept = decided.action == "kept" and harness_revision(a.agent_dir) == harmless.revision
    return Result(kept, f"monitor: {decided.action} after {sent} sessions", decided.reason)


def healthy(a: Attempt) -> Result:
    """No cycle past detect: an agent whose harness already has the fixes serves 40 live runs; the seeds'
    trigger rule (``--trigger seed``; see ``DETECT_RUNS``) finds no regression, so no cycle starts and no editor
    is asked."""
    a.use_editors(editors.true_fix)
    instructions = a.agent_dir / "instructions.md"
    instructions.write_text(instructions.read_text(encoding="utf-8").rstrip("\n") + f"\n\n{rules.MONTH_RULE}\n",
                            encoding="utf-8")
    skill = a.agent_dir / rules.MONEY_SKILL_PATH
    skill.parent.mkdir(parents=True)
    skill.write_text(rules.MONEY_SKILL, encoding="utf-8")
    setup = a.setup(DEFAULT, observe=True)
    outcomes = traffic.sessions(a, traffic.EVERY_TASK, DETECT_RUNS)
    window = detect(a)
    if window is None:
        return miss("too few scored live runs to judge", f"{len(outcomes)} sessions")
    if window.regressed:
        run_cycle(setup)  # what the daemon's trigger would start
    cycles = audit_actions(a.agent_dir).count("cycle-start")
    idle = not window.regressed and cycles == 0 and a.editor_meter.requests == 0
    return Result(idle, "idle: no regression, no cycle" if idle else f"{cycles} cycles started",
                  window.describe())


def detect(a: Attempt) -> Window | None:
    """The seeds' trigger rule (``lousho.observe.trigger.detector.judge``, the daemon's ``--trigger seed``) on the
    live revision's scored runs."""
    frame = runs(connect(a.bench.daemon_url), agent=a.name, revision="live")
    outcomes = [bool(p) for p in frame["passed"].to_list() if p is not None]
    return judge(outcomes)


def canary_traffic(a: Attempt) -> Result:
    """Retired, not promoted: the proposal fixes the training case and passes the gate, the canary and the
    corpus (none has a text helper), then serves a share of live sessions, mostly text helpers, which it
    breaks; the watcher retires it without writing."""
    a.use_editors(editors.planted)
    setup = a.setup(NO_TEXT, observe=True, config={"traffic_canary": True})
    before = files(a.agent_dir)
    started = run_cycle(setup)
    if started.outcome != "traffic" or started.proposal_id is None:
        written = files(a.agent_dir) != before
        if written:
            return Result(False, f"{started.outcome}: written before the traffic canary", started.reason)
        return miss(f"no candidate reached the traffic canary: {started.outcome}", started.reason)
    owner = new_owner()
    decided = None
    served = 0
    while served < CANARY_MAX_SESSIONS:
        traffic.sessions(a, traffic.text_heavy(), CANARY_BATCH, salt=str(served))
        served += CANARY_BATCH
        decided = tick(setup, owner)
        if decided.reason.startswith(("retired", "promoted")):
            break
    status = load_proposal(a.paths, started.proposal_id)["status"]
    retired = status == "retired" and files(a.agent_dir) == before and "apply" not in audit_actions(a.agent_dir)
    return Result(retired, f"{status} after {served} sessions", decided.reason if decided else "no tick")
