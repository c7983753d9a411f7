"""The traffic canary: routing bounds (share, cap, stickiness) across threads and processes, the agent CLI
served from the candidate, and the decision rule (retire a harmful candidate, promote a harmless one)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lousho.agent.directory import harness_revision
from lousho.agent.traffic_route import CANDIDATE, Route, TrafficFileInvalid, read_traffic, route
from lousho.improve import traffic
from lousho.improve.harness import Harness, read_harness
from lousho.improve.state import Paths
from lousho.models.scripted import ScriptedModelServer
from lousho.observe.client.store_client import connect

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))
from agent_support import EXAMPLE, copy_example, lousho  # noqa: E402  (tests/agent's helpers: the example agent)

CAREFUL = "Always call the add tool to add numbers."


def _candidate(base: Harness) -> Harness:
    return base.with_file("instructions.md", base.instructions.rstrip() + f"\n- {CAREFUL}\n")


def _started(agent_dir: Path, share: float = 0.25, max_sessions: int = 50) -> tuple[Paths, Harness, Harness]:
    paths = Paths(agent_dir)
    base = read_harness(agent_dir)
    candidate = _candidate(base)
    traffic.start(paths, base, candidate, agent_dir, share=share, max_sessions=max_sessions, proposal_id="p-1")
    return paths, base, candidate


def _counts(agent_dir: Path) -> tuple[int, int]:
    assignments = (read_traffic(agent_dir) or {})["assignments"]
    return list(assignments.values()).count(CANDIDATE), len(assignments)


# --- routing ---


def test_without_a_canary_file_the_agent_directory_serves_and_nothing_is_written(tmp_path):
    agent_dir = copy_example(tmp_path / "agent")
    served = route(agent_dir, "s-1")
    assert (served.directory, served.arm) == (agent_dir, None)
    assert not (agent_dir / ".lousho").exists()


@settings(derandomize=True, deadline=None, max_examples=25)
@given(st.lists(st.integers(0, 299).map(lambda i: f"s{i}"), min_size=1, max_size=400))
@example([f"s{i}" for i in range(300)] + [f"s{i}" for i in range(0, 300, 7)])  # past the cap, then repeats
def test_the_candidate_never_holds_more_than_its_share_or_cap_and_sessions_keep_their_arm(sessions):
    with tempfile.TemporaryDirectory() as tmp:
        agent_dir = copy_example(Path(tmp) / "agent")
        _, _, candidate = _started(agent_dir)
        arms: dict[str, str | None] = {}
        for session in sessions:
            served = route(agent_dir, session)
            assert arms.setdefault(session, served.arm) == served.arm, "a repeated session changed its arm"
            on_candidate, assigned = _counts(agent_dir)
            assert assigned == len(arms)
            assert on_candidate <= 0.25 * assigned and on_candidate <= 50
            # The bound is the only thing that sends a session to the base: the candidate gets all it may.
            assert on_candidate == min(50, assigned // 4)
            if served.arm == CANDIDATE:
                assert harness_revision(served.directory) == candidate.revision
            else:
                assert (served.directory, served.arm) == (agent_dir, "base")


_ROUTER = """
import json, sys, threading
from pathlib import Path
from lousho.agent.traffic_route import route

agent_dir, worker = Path(sys.argv[1]), sys.argv[2]
arms = {}

def serve(half):
    for i in range(30):
        session = f"{worker}-{half}-{i}"
        arms[session] = route(agent_dir, session).arm

threads = [threading.Thread(target=serve, args=(half,)) for half in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(arms))
"""


def test_four_processes_routing_at_once_keep_the_bounds_and_give_each_session_one_arm(tmp_path):
    agent_dir = copy_example(tmp_path / "agent")
    _started(agent_dir)
    workers = [subprocess.Popen([sys.executable, "-c", _ROUTER, str(agent_dir), f"w{n}"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for n in range(4)]
    seen: dict[str, str] = {}
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        seen.update(json.loads(out))
    assignments = (read_traffic(agent_dir) or {})["assignments"]
    assert len(seen) == 240 and assignments == seen  # no assignment lost, each session exactly one arm
    on_candidate = list(assignments.values()).count(CANDIDATE)
    assert on_candidate == min(50, 240 // 4)


def test_a_finished_canary_routes_every_session_back_to_the_agent_directory(tmp_path):
    agent_dir = copy_example(tmp_path / "agent")
    paths, _, _ = _started(agent_dir)
    for i in range(4):
        route(agent_dir, f"s{i}")
    assert route(agent_dir, "s3").arm == CANDIDATE
    traffic.finish(paths, "retire")
    data = traffic.status(paths) or {}
    assert data["status"] == "retired" and data["finished_at"] is not None
    assert route(agent_dir, "s3") == route(agent_dir, "new") == Route(agent_dir, None)
    with pytest.raises(traffic.TrafficNotRunning):
        traffic.finish(paths, "promote")


def test_a_second_canary_is_refused_while_one_runs(tmp_path):
    agent_dir = copy_example(tmp_path / "agent")
    paths, base, candidate = _started(agent_dir)
    with pytest.raises(traffic.TrafficRunning) as e:
        traffic.start(paths, base, candidate, agent_dir, share=0.25, max_sessions=50)
    assert e.value.code == "LOUSHO_IMPROVE_TRAFFIC_RUNNING"


@pytest.mark.parametrize(("share", "max_sessions"), [(0.3, 50), (0.0, 50), (0.25, 51), (0.25, 0)])
def test_a_canary_outside_the_seeds_limits_is_refused(tmp_path, share, max_sessions):
    agent_dir = copy_example(tmp_path / "agent")
    base = read_harness(agent_dir)
    with pytest.raises(traffic.TrafficInvalid):
        traffic.start(Paths(agent_dir), base, _candidate(base), agent_dir, share=share, max_sessions=max_sessions)
    assert not (agent_dir / ".lousho" / "traffic.json").exists()


def test_a_canary_against_a_base_the_directory_no_longer_holds_is_refused(tmp_path):
    agent_dir = copy_example(tmp_path / "agent")
    stale = read_harness(agent_dir)
    (agent_dir / "instructions.md").write_text("Someone edited this.\n", encoding="utf-8")
    with pytest.raises(traffic.TrafficInvalid, match="changed since"):
        traffic.start(Paths(agent_dir), stale, _candidate(stale), agent_dir, share=0.25, max_sessions=50)


def test_a_hand_edited_traffic_file_pointing_outside_the_candidates_is_refused(tmp_path):
    agent_dir = copy_example(tmp_path / "agent")
    _started(agent_dir)
    path = agent_dir / ".lousho" / "traffic.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "directory": "../elsewhere"}), encoding="utf-8")
    with pytest.raises(TrafficFileInvalid) as e:
        route(agent_dir, "s1")
    assert e.value.code == "LOUSHO_AGENT_TRAFFIC_FILE_INVALID"


# --- the agent CLI under a canary ---


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    """The example agent's scripted model (as tests/agent's fixture), over real HTTP."""
    with ScriptedModelServer(EXAMPLE / "model.py", seed=3) as server:
        yield server


@pytest.mark.system
def test_agent_run_serves_an_assigned_session_from_the_candidate_and_labels_its_arm(tmp_path, model, daemon):
    from lousho.recover.store import open as open_store

    agent_dir = copy_example(tmp_path / "agent")
    paths, base, candidate = _started(agent_dir)
    assert [route(agent_dir, f"s{i}").arm for i in range(4)] == ["base", "base", "base", CANDIDATE]
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    common = ["--model-url", model.url, "--model", "scripted", "--store", store, "--observe", daemon.url,
              "--check", str(agent_dir / "check.py"), "--json"]
    for session in ("s3", "s0"):  # the candidate's session, then a base one
        done = lousho("agent", "run", str(agent_dir), "add 2 3 4", "--run-id", f"r-{session}",
                      "--session", session, *common)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["finish_reason"] == "stop"
    runs = open_store(store, create=False)
    try:
        on_candidate, on_base = runs.get_run("r-s3"), runs.get_run("r-s0")
    finally:
        runs.close()
    assert on_candidate is not None and on_base is not None
    assert on_candidate.input["options"]["traffic_arm"] == CANDIDATE
    assert harness_revision(Path(on_candidate.input["agent_dir"])) == candidate.revision  # a resume stays on it
    assert on_base.input["options"]["traffic_arm"] == "base"
    assert Path(on_base.input["agent_dir"]).resolve() == agent_dir.resolve()
    # The runs view sees both arms under their revisions, so decide() can read them from the store.
    decision = traffic.decide(paths, store=connect(daemon.url))
    assert decision.action == "continue"
    assert (decision.candidate_runs, decision.candidate_passes, decision.base_runs) == (1, 1, 1)


# --- the decision ---


def _decide(tmp_path: Path, candidate: tuple[int, int], base: tuple[int, int]) -> traffic.TrafficDecision:
    """Decide on ``candidate`` and ``base`` given as (passes, runs)."""
    agent_dir = copy_example(tmp_path / "agent")
    paths, _, harness = _started(agent_dir)

    def outcomes(revision: str) -> tuple[list[bool], list[bool]]:
        assert revision == harness.revision
        return ([True] * candidate[0] + [False] * (candidate[1] - candidate[0]),
                [True] * base[0] + [False] * (base[1] - base[0]))

    return traffic.decide(paths, outcomes)


def test_a_harmful_candidate_is_retired_not_promoted(tmp_path):
    decision = _decide(tmp_path, (30, 50), (45, 50))
    assert decision.action == "retire"
    assert (decision.candidate_passes, decision.candidate_runs, decision.base_passes, decision.base_runs) == (
        30, 50, 45, 50)
    assert decision.p_value is not None and decision.p_value < 0.05


def test_an_equal_candidate_is_promoted(tmp_path):
    decision = _decide(tmp_path, (45, 50), (45, 50))
    assert decision.action == "promote" and decision.p_value is not None and decision.p_value > 0.05


def test_a_candidate_passing_everything_like_the_base_is_promoted(tmp_path):
    assert _decide(tmp_path, (50, 50), (150, 150)).action == "promote"


def test_a_drop_over_the_margin_retires_even_when_not_significant(tmp_path):
    decision = _decide(tmp_path, (42, 50), (45, 50))
    assert decision.action == "retire" and decision.p_value is not None and decision.p_value > 0.05


def test_a_drop_within_the_margin_and_not_significant_is_promoted(tmp_path):
    assert _decide(tmp_path, (43, 50), (45, 50)).action == "promote"


def test_a_clearly_harmful_candidate_is_retired_after_ten_runs(tmp_path):
    decision = _decide(tmp_path, (0, 10), (45, 50))
    assert decision.action == "retire" and decision.candidate_runs == 10
    assert decision.p_value is not None and decision.p_value < 0.01


def test_nine_runs_are_too_few_for_an_early_retire(tmp_path):
    assert _decide(tmp_path, (0, 9), (45, 50)).action == "continue"


@pytest.mark.parametrize(("candidate", "base"), [((20, 20), (40, 50)), ((8, 10), (45, 50)), ((40, 49), (45, 50))])
def test_fewer_than_all_sessions_scored_and_no_clear_harm_continues(tmp_path, candidate, base):
    assert _decide(tmp_path, candidate, base).action == "continue"


def test_no_base_runs_to_compare_with_continues(tmp_path):
    decision = _decide(tmp_path, (50, 50), (0, 0))
    assert decision.action == "continue" and decision.p_value is None


def test_deciding_without_a_running_canary_is_refused(tmp_path):
    agent_dir = copy_example(tmp_path / "agent")
    with pytest.raises(traffic.TrafficNotRunning):
        traffic.decide(Paths(agent_dir), lambda revision: ([], []))
