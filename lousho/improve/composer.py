"""The composer: merge what the probes support into one harness, or change nothing (seed §3.2 step 3).

A proposal is *supported* when its probe passed more runs of some training case than the current
harness did and fewer of none. Supported edits to different files are combined; edits to the same
file are merged hunk by hunk when they touch different lines, and otherwise the better-probed one
wins (more passes, then the cheaper passing run: in dollars when every probe's runs have a price, else
in tokens, as the gate's cost rule compares them).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from lousho.improve.harness import Harness, HarnessWriteRefused
from lousho.improve.pricing import PerPass, Unit, cost_unit, in_unit


@dataclass(frozen=True)
class Probed:
    """A proposal's harness with its probe's score on the training cases."""

    name: str
    harness: Harness
    passes: int
    gains: int  # training cases it passed more runs of than the current harness
    losses: int  # training cases it passed fewer runs of
    per_pass: PerPass  # what a passing run cost in its probe: inf when it passed nothing

    @property
    def supported(self) -> bool:
        return self.gains > 0 and self.losses == 0

    def rank(self, unit: Unit) -> tuple[int, float]:
        return (-self.passes, in_unit(self.per_pass, unit))


@dataclass(frozen=True)
class Composition:
    harness: Harness | None  # None: nothing supported, change nothing
    merged_from: tuple[str, ...]
    conflicts: tuple[str, ...]  # files where one supported edit had to give way to a better one
    reason: str


def compose(base: Harness, probed: Sequence[Probed]) -> Composition:
    unit = cost_unit(p.per_pass for p in probed if p.supported)
    supported = sorted((p for p in probed if p.supported), key=lambda p: p.rank(unit))
    if not supported:
        return Composition(None, (), (), "no proposal improved a training case without losing one in its probe")
    files = dict(base.files)
    used: set[str] = set()
    conflicts: list[str] = []
    for paths in sorted({path for p in supported for path in base.changed_paths(p.harness)}):
        merged = base.files.get(paths)
        for p in supported:  # best first: it lays its edit down, the others merge around it
            theirs = p.harness.files.get(paths)
            if theirs is None or theirs == base.files.get(paths):
                continue
            result = theirs if merged == base.files.get(paths) else merge3(base.files.get(paths) or "", merged or "",
                                                                           theirs)
            if result is None:
                conflicts.append(f"{paths}: kept {_owner(supported, paths, merged)}'s edit over {p.name}'s")
                continue
            merged = result
            used.add(p.name)
        if merged is not None:
            files[paths] = merged
    harness = base
    try:
        for path, text in sorted(files.items()):
            if base.files.get(path) != text:
                harness = harness.with_file(path, text)
    except HarnessWriteRefused as e:
        best = supported[0]
        return Composition(best.harness, (best.name,), (f"merge refused ({e.message}); took {best.name} alone",),
                           f"took the best-probed proposal, {best.name}")
    names = tuple(p.name for p in supported if p.name in used)
    return Composition(harness, names, tuple(conflicts), "merged " + ", ".join(names))


def merge3(base: str, ours: str, theirs: str) -> str | None:
    """A line-based three-way merge; None when both sides change overlapping lines differently."""
    b = base.splitlines(keepends=True)
    edits = sorted(_edits(b, ours.splitlines(keepends=True)) + _edits(b, theirs.splitlines(keepends=True)))
    out: list[str] = []
    at = 0
    last: tuple[int, int, tuple[str, ...]] | None = None
    for start, end, lines in edits:
        if last is not None and last == (start, end, lines):
            continue  # both sides made the same change
        if start < at or (last is not None and start == last[0] == end == last[1]):
            return None  # overlapping changes, or two insertions at one point: order is ambiguous
        out.extend(b[at:start])
        out.extend(lines)
        at = end
        last = (start, end, lines)
    out.extend(b[at:])
    return "".join(out)


def _edits(base: list[str], other: list[str]) -> list[tuple[int, int, tuple[str, ...]]]:
    matcher = difflib.SequenceMatcher(a=base, b=other, autojunk=False)
    return [(i1, i2, tuple(other[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def _owner(supported: Sequence[Probed], path: str, text: str | None) -> str:
    for p in supported:
        if p.harness.files.get(path) == text:
            return p.name
    return "the merged"
