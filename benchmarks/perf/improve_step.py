"""What one improvement step costs beyond the agent runs it makes.

The step is mostly agent runs (search, probes, gate, and in the loop the canary and the guard). This
measures, on the scripted models over real HTTP, one step's wall time against the same number of bare
agent runs made by the same probe in the same process, and reports the ratio (the step's own
overhead: editors, composing, gating, statistics, materialising harness copies), plus the step's
requests, tokens and runs. Medians over --repeats.

    .venv/bin/python benchmarks/perf/improve_step.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "improve"))

from improve_support import ADD_FIX, agent_policy, editor_script, make_agent  # noqa: E402

from lousho.improve import StepOptions, improve_agent  # noqa: E402
from lousho.improve.check_module import load_check_module, module_cases  # noqa: E402
from lousho.improve.probe import AgentProbe  # noqa: E402
from lousho.models.config import ModelConfig  # noqa: E402
from lousho.models.scripted import ScriptedModelServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    steps, bare, ratios = [], [], []
    with ScriptedModelServer(agent_policy) as model, ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as ed:
        agent_model, editor_model = ModelConfig(model.url, "agent"), ModelConfig(ed.url, "editor")
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                agent, check = make_agent(Path(tmp))
                started = time.perf_counter()
                result = improve_agent(agent, check, StepOptions(model=agent_model, editor_model=editor_model))
                step_s = time.perf_counter() - started
                assert result.outcome == "proposal", result.reason
                runs = result.cost.agent_runs
                module = load_check_module(check)
                cases = module_cases(module)
                probe = AgentProbe(agent_model, module.check, {}, work_dir=Path(tmp))
                started = time.perf_counter()
                for i in range(runs):
                    probe(agent, cases[i % len(cases)], i)
                bare_s = time.perf_counter() - started
            steps.append(step_s)
            bare.append(bare_s)
            ratios.append(step_s / bare_s)
    print(f"one step: {statistics.median(steps):.2f} s median over {args.repeats}; "
          f"{result.cost.agent_runs} agent runs, {result.cost.requests} model requests, {result.cost.tokens} tokens, "
          f"{result.cost.editor_requests} editor requests")
    print(f"the same {result.cost.agent_runs} bare agent runs: {statistics.median(bare):.2f} s median")
    print(f"step / bare runs: {statistics.median(ratios):.2f}x median (min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
