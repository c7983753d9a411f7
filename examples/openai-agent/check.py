"""The order desk's check module: what the loop needs to improve an agent it did not build.

- ``check(input, output)``: the verdict of one answer (the agent also records it on each live run).
- ``cases()``: inputs the loop replays for every candidate edit.
- ``probe(harness_dir, case, repeat)``: run *this* agent on one case with the harness at ``harness_dir``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from lousho.agent import Verdict
from lousho.improve import ProbeResult

sys.path.insert(0, str(Path(__file__).resolve().parent))  # agent.py sits next to this file

import agent  # noqa: E402

_ORDER_ID = re.compile(r"\b([A-Za-z])-(\d+)\b")


def check(input_text: str, output: str | None) -> Verdict:
    """Pass when the answer names the order's real status (from the shop's data)."""
    found = _ORDER_ID.search(input_text)
    if found is None:
        return Verdict("pass") if output else Verdict("fail", failed_check="answers", explanation="no answer")
    order = agent.ORDERS.get(f"{found.group(1).upper()}-{found.group(2)}")
    if order is None:
        return Verdict("pass")  # an unknown order: nothing to get right
    if output and order[0] in output.lower():
        return Verdict("pass")
    return Verdict("fail", failed_check="names-order-status",
                   explanation=f"the order is {order[0]}, and the answer does not say so")


def cases() -> list[dict[str, str]]:
    return [
        {"id": "upper-a1", "input": "Where is order A-1?"},
        {"id": "lower-a3", "input": "hi, where is my order a-3? thanks"},
        {"id": "lower-b2", "input": "hi, where is my order b-2? thanks"},
        {"id": "lower-c2", "input": "hi, where is my order c-2? thanks"},
    ]


def probe(harness_dir: Path, case, repeat: int) -> ProbeResult:
    """One fresh run of the agent on ``case`` with the candidate harness.

    The seeds' rules: a new client and a new conversation per call (no state shared between repeats or
    cases); the instructions and skills come only from ``harness_dir``; and ``dry_run`` is the shadow for
    side effects: escalate writes nothing during a probe. An exception (the model unreachable) makes the
    run one that cannot be scored, which lousho records with the error.
    """
    result = agent.answer(agent.OpenAI(), agent.model(), Path(harness_dir), case.input, dry_run=True)
    return ProbeResult(result["output"], tokens=result["tokens"], requests=result["requests"])
