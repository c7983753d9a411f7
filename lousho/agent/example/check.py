"""The example agent's check: an "add" answer must state the right sum."""

import re

from lousho.agent import Verdict


def check(input_text, output):
    if not input_text.startswith("add"):
        return Verdict("cannot-score")
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", input_text)]
    expected = sum(numbers)
    found = re.findall(r"-?\d+(?:\.\d+)?", output or "")
    if found and abs(float(found[-1]) - expected) < 1e-9:
        return Verdict("pass")
    return Verdict("fail", failed_check="sum-correct", explanation=f"expected {expected:g}")
