"""The traffic canary and the monitor's holdback, loop side (seed §4.2): start, judge, finish.

An opt-in canary serves the candidate harness to at most 25% of new sessions and at most 50 sessions
before a promote. ``start`` materialises the candidate and writes ``.lousho/traffic.json`` (its format is
the contract in ``lousho.agent.traffic_route``, which does the routing); ``decide`` compares the
candidate arm's scored runs with the base arm's from the same period; ``finish`` closes the canary, after
which every new session is served by the agent directory again. Who may start a canary (a person's
approval in manual mode) and the promotion itself (the loop's writer) are the caller's.

Decision rule, on scored non-probe runs labelled ``lousho.traffic.arm``:

- **early retire**: at any time, once the candidate has ``EARLY_MIN_RUNS`` (10) scored runs and the
  one-sided Fisher exact test (candidate passes less often than base) gives p < ``EARLY_ALPHA`` (0.01):
  a clearly harmful candidate must not serve all its sessions;
- **continue** until the candidate has ``max_sessions`` scored runs (one run per session for
  ``lousho agent run``);
- then **retire** if its pass rate is below the base's by more than ``MARGIN`` (0.05) or the one-sided
  Fisher p < ``ALPHA`` (0.05); otherwise **promote**.

The **holdback** is the same split turned round, after a write: ``start_holdback`` materialises the base
revision and keeps it on a share of new sessions (``HOLDBACK``, 20% by default, ``HOLDBACK_RANGE``) while the
monitor watches the edit, so the monitor has a concurrent control (``lousho.analysis.Monitor``'s
``concurrent`` design); ``end_holdback`` ends it with the watch. The router's hash rule
(``lousho.agent.traffic_route``) assigns the sessions. One split runs at a time: a holdback is not started
while a canary runs (the watch then runs ``stratified``).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lousho.agent.directory import harness_revision
from lousho.agent.traffic_route import (
    BASE,
    CANARY,
    CANDIDATE,
    CANDIDATES_DIR,
    HOLDBACK,
    RUNNING,
    VERSION,
    locked,
    read_traffic,
    write_traffic,
)
from lousho.improve.harness import Harness, agent_name, materialize
from lousho.improve.state import Paths, iso, now_utc, parse_iso
from lousho.kernel.errors import UsageError

MAX_SHARE = 0.25  # seed §4.2: at most 25% of new sessions
MAX_SESSIONS = 50  # seed §4.2: at most 50 sessions before a promote
MARGIN = 0.05  # a drop in pass rate larger than this retires, significant or not
ALPHA = 0.05
EARLY_ALPHA = 0.01
EARLY_MIN_RUNS = 10
# The monitor's holdback: the base's share of new sessions while an edit is watched. The same numbers as
# lousho.analysis.monitor's HOLDBACK and HOLDBACK_RANGE (tests/improve/test_holdback.py holds them equal),
# kept here so that reading the loop's config does not load the analysis stack.
HOLDBACK_SHARE = 0.2
HOLDBACK_RANGE = (0.1, 0.25)
ENDED = "ended"

Action = Literal["continue", "promote", "retire"]
Outcomes = Callable[[str], tuple[Sequence[bool], Sequence[bool]]]
_FINAL = {"promote": "promoted", "retire": "retired", "promoted": "promoted", "retired": "retired"}


class TrafficRunning(UsageError):
    code = "LOUSHO_IMPROVE_TRAFFIC_RUNNING"
    hint = "decide and finish the running canary first (lousho.improve.traffic.decide, then finish)"


class TrafficNotRunning(UsageError):
    code = "LOUSHO_IMPROVE_TRAFFIC_NOT_RUNNING"
    hint = "start a canary first (lousho.improve.traffic.start); status() shows the last one"


class TrafficInvalid(UsageError):
    code = "LOUSHO_IMPROVE_TRAFFIC_INVALID"
    hint = (f"share in (0, {MAX_SHARE}], max_sessions in 1..{MAX_SESSIONS}, a candidate that differs from a "
            "base equal to the agent directory's harness; pass outcomes or a store to decide()")


@dataclass(frozen=True)
class TrafficDecision:
    action: Action
    reason: str
    candidate_runs: int
    candidate_passes: int
    base_runs: int
    base_passes: int
    p_value: float | None  # one-sided Fisher exact, candidate worse than base; None when a side has no runs


def start(paths: Paths, base: Harness, candidate: Harness, agent_dir: Path, *, share: float, max_sessions: int,
          proposal_id: str | None = None) -> None:
    """Materialise ``candidate`` under ``.lousho/traffic/<revision>/`` and start routing new sessions to it.

    Refused while a canary runs, when ``agent_dir`` no longer holds ``base`` (the comparison would be
    against a harness nobody reviewed), and outside the seeds' limits.
    """
    root = Path(agent_dir)
    _check_start(paths, base, candidate, root, share, max_sessions)
    with locked(root):
        _refuse_running(paths, root)
        # <revision>/<the agent directory's own name>: an agent without a name in agent.toml is named after
        # its folder, so the candidate's runs carry the same agent name as the base's.
        relative = CANDIDATES_DIR / candidate.revision / root.resolve().name
        target = root / relative
        if target.parent.exists():
            shutil.rmtree(target.parent)  # an earlier canary of the same revision; nothing routes to it now
        materialize(candidate, root, target)
        _share_workspace(root, target)
        write_traffic(root, {
            "version": VERSION, "kind": CANARY, "status": RUNNING, "share": share, "max_sessions": max_sessions,
            "directory": relative.as_posix(), "assignments": {}, "base_revision": base.revision,
            "candidate_revision": candidate.revision, "agent": _agent_name(root), "proposal_id": proposal_id,
            "started_at": iso(now_utc()), "finished_at": None,
        })


def _refuse_running(paths: Paths, root: Path) -> None:
    """One split at a time: a canary or a holdback already routing sessions refuses a second (under the lock)."""
    current = read_traffic(root)
    if current is not None and current["status"] == RUNNING:
        raise TrafficRunning(f"{paths.traffic}: a {current.get('kind', CANARY)} of "
                             f"{current.get('candidate_revision')} is running")


def start_holdback(paths: Paths, base: Harness, applied: Harness, agent_dir: Path, *, share: float,
                   proposal_id: str | None = None) -> None:
    """Materialise ``base`` under ``.lousho/traffic/<base revision>/`` and hold it back on ``share`` of new
    sessions: called right after the writer put ``applied`` in the agent directory.

    Refused while a canary or another holdback runs (``TrafficRunning``: end it first, or run the watch
    stratified), when the directory does not hold ``applied`` (a person changed it since the write), and
    outside ``HOLDBACK_RANGE``.
    """
    root = Path(agent_dir)
    low, high = HOLDBACK_RANGE
    if isinstance(share, bool) or not isinstance(share, int | float) or not low <= share <= high:
        raise TrafficInvalid(f"holdback share={share!r}: must be in [{low}, {high}]")
    if paths.agent_dir.resolve() != root.resolve():
        raise TrafficInvalid(f"paths are for {paths.agent_dir}, the agent directory is {root}")
    if applied.revision == base.revision:
        raise TrafficInvalid(f"the applied edit is the base ({base.revision}): nothing to hold back")
    on_disk = harness_revision(root)
    if on_disk != applied.revision:
        raise TrafficInvalid(f"{root} holds harness {on_disk}, not the applied {applied.revision}")
    with locked(root):
        _refuse_running(paths, root)
        relative = CANDIDATES_DIR / base.revision / root.resolve().name
        target = root / relative
        # A copy of this revision already there (a promoted canary's base, an earlier holdback) is kept: its
        # interrupted runs may still resume from it, and it serves the same harness.
        if not (target.is_dir() and harness_revision(target) == base.revision):
            if target.parent.exists():
                shutil.rmtree(target.parent)
            materialize(base, root, target)
            _share_workspace(root, target)
        write_traffic(root, {
            "version": VERSION, "kind": HOLDBACK, "status": RUNNING, "share": share,
            "salt": uuid.uuid4().hex, "directory": relative.as_posix(), "assignments": {},
            "base_revision": base.revision, "candidate_revision": applied.revision, "agent": _agent_name(root),
            "proposal_id": proposal_id, "started_at": iso(now_utc()), "finished_at": None,
        })


def running_holdback(paths: Paths) -> dict[str, Any] | None:
    """The running holdback's traffic file, or None when no holdback runs (none, or a canary)."""
    data = read_traffic(paths.agent_dir)
    if data is None or data["status"] != RUNNING or data.get("kind", CANARY) != HOLDBACK:
        return None
    return data


def end_holdback(paths: Paths, reason: str) -> dict[str, Any] | None:
    """End the running holdback, if one runs: every new session is then served by the agent directory.
    Returns the ended holdback's file (None when none ran). The base's copy stays, so the held-back
    sessions' interrupted runs can resume."""
    root = paths.agent_dir
    with locked(root):
        data = running_holdback(paths)
        if data is None:
            return None
        ended = {**data, "status": ENDED, "finished_at": iso(now_utc()), "reason": reason}
        write_traffic(root, ended)
    return ended


def status(paths: Paths) -> dict[str, Any] | None:
    """The traffic file's contents (running or the last finished canary), or None when there never was one."""
    return read_traffic(paths.agent_dir)


def decide(paths: Paths, outcomes: Outcomes | None = None, *, store: Any | None = None,
           agent: str | None = None) -> TrafficDecision:
    """Judge the running canary; it changes nothing (``finish`` does).

    The scored outcomes (True: passed) of each arm come from ``outcomes(candidate_revision)`` returning
    ``(candidate, base)``, or from ``store`` (a ``lousho.observe.client.store_client.StoreClient``): the non-probe runs
    of ``agent`` (default: the name recorded at start) since the canary started, by ``traffic_arm`` and the
    arm's harness revision.
    """
    data = read_traffic(paths.agent_dir)
    if data is None or data["status"] != RUNNING or data.get("kind", CANARY) != CANARY:
        raise TrafficNotRunning(f"{paths.traffic}: no canary is running")
    if (outcomes is None) == (store is None):
        raise TrafficInvalid("decide() takes exactly one of outcomes and store")
    if outcomes is not None:
        cand, base = outcomes(data["candidate_revision"])
    else:
        cand, base = _store_outcomes(store, data, agent or data["agent"])
    return judge(cand, base, data["max_sessions"])


def judge(candidate: Sequence[bool], base: Sequence[bool], max_sessions: int) -> TrafficDecision:
    """The decision rule of the module docstring on two lists of scored outcomes."""
    cr, cp, br, bp = len(candidate), sum(map(bool, candidate)), len(base), sum(map(bool, base))
    p = _fisher_less(cp, cr, bp, br)

    def verdict(action: Action, reason: str) -> TrafficDecision:
        return TrafficDecision(action, reason, cr, cp, br, bp, p)

    counts = f"candidate {cp}/{cr}, base {bp}/{br}"
    if cr >= EARLY_MIN_RUNS and p is not None and p < EARLY_ALPHA:
        return verdict("retire", f"clearly worse early: {counts}, one-sided Fisher p={p:.3g} < {EARLY_ALPHA}")
    if cr < max_sessions:
        return verdict("continue", f"{cr} of {max_sessions} candidate runs scored ({counts})")
    if p is None:
        return verdict("continue", f"no scored base runs to compare with ({counts})")
    drop = bp / br - cp / cr
    if drop > MARGIN:
        return verdict("retire", f"pass rate {drop:.3f} below the base's, over the {MARGIN} margin ({counts})")
    if p < ALPHA:
        return verdict("retire", f"significantly worse: {counts}, one-sided Fisher p={p:.3g} < {ALPHA}")
    return verdict("promote", f"no harm found: {counts}, drop {drop:.3f}, one-sided Fisher p={p:.3g}")


def finish(paths: Paths, action: str) -> None:
    """End the running canary as ``promote``/``retire`` (or ``promoted``/``retired``): every new session is
    then served by the agent directory. The candidate's copy stays, so its interrupted runs can resume."""
    final = _FINAL.get(action)
    if final is None:
        raise TrafficInvalid(f"finish action {action!r}: expected 'promote' or 'retire'")
    root = paths.agent_dir
    with locked(root):
        data = read_traffic(root)
        if data is None or data["status"] != RUNNING or data.get("kind", CANARY) != CANARY:
            raise TrafficNotRunning(f"{paths.traffic}: no canary is running")
        write_traffic(root, {**data, "status": final, "finished_at": iso(now_utc())})


def _fisher_less(cand_passes: int, cand_runs: int, base_passes: int, base_runs: int) -> float | None:
    if cand_runs == 0 or base_runs == 0:
        return None
    # scipy.stats loads here: reading the traffic file (`lousho improve status`) must not pay half a second.
    from scipy.stats import fisher_exact

    table = [[cand_passes, cand_runs - cand_passes], [base_passes, base_runs - base_passes]]
    return float(fisher_exact(table, alternative="less").pvalue)


def _store_outcomes(store: Any, data: dict[str, Any], agent: str) -> tuple[list[bool], list[bool]]:
    import polars as pl

    from lousho.analysis.frames import runs

    frame = runs(store, agent=agent, since=parse_iso(data["started_at"])).filter(pl.col("passed").is_not_null())

    def arm(name: str, revision: str) -> list[bool]:
        chosen = frame.filter((pl.col("traffic_arm") == name) & (pl.col("harness_revision") == revision))
        return [bool(v) for v in chosen["passed"].to_list()]

    return arm(CANDIDATE, data["candidate_revision"]), arm(BASE, data["base_revision"])


def _check_start(paths: Paths, base: Harness, candidate: Harness, root: Path, share: float,
                 max_sessions: int) -> None:
    if paths.agent_dir.resolve() != root.resolve():
        raise TrafficInvalid(f"paths are for {paths.agent_dir}, the agent directory is {root}")
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= MAX_SHARE:
        raise TrafficInvalid(f"share={share!r}: must be in (0, {MAX_SHARE}]")
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or not 0 < max_sessions <= MAX_SESSIONS:
        raise TrafficInvalid(f"max_sessions={max_sessions!r}: must be in 1..{MAX_SESSIONS}")
    if candidate.revision == base.revision:
        raise TrafficInvalid(f"the candidate is the base ({base.revision}): nothing to test")
    on_disk = harness_revision(root)
    if on_disk != base.revision:
        raise TrafficInvalid(f"{root} holds harness {on_disk}, not the base {base.revision}: it changed since "
                             "the cycle read it")


def _share_workspace(root: Path, target: Path) -> None:
    # Real traffic has real effects: the candidate's tools write to the agent's own scratch space, not a
    # private copy that would vanish with the canary (materialize never copies workspace/).
    workspace = root / "workspace"
    workspace.mkdir(exist_ok=True)
    (target / "workspace").symlink_to(workspace.resolve(), target_is_directory=True)


def _agent_name(root: Path) -> str:
    return agent_name(root)
