"""The check module a step is given: ``check(input, output) -> Verdict``, optional ``cases()``,
``probe(harness_dir, case, repeat) -> RunRecord`` and ``read_only`` (tools safe to run in a probe)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from lousho.agent import directory as agent_directory
from lousho.agent.errors import AgentDirInvalid
from lousho.agent.verdict import Check
from lousho.improve.errors import CheckModuleInvalid, CheckRaised
from lousho.improve.probe import Probe
from lousho.improve.records import Case

# The check module runs in lousho's own interpreter (the step's, the daemon's): what it imports (the agent's
# framework, its tools) must be installed there.
IMPORT_HINT = ("the check module runs in lousho's own Python: install lousho in the agent's environment and run "
               "lousho from there (or install the missing package where lousho is); see docs/improve.md")


@dataclass(frozen=True)
class CheckModule:
    check: Check
    cases: Callable[[], Any] | None = None
    probe: Probe | None = None
    read_only: Sequence[str] | None = None
    name: str = "check"


def load_check_module(source: str | Path | ModuleType | CheckModule | Check) -> CheckModule:
    """From a file path, a module, a CheckModule, or a bare check function."""
    if isinstance(source, CheckModule):
        return source
    if isinstance(source, str | Path):
        try:
            module = agent_directory.exec_module(Path(source), "check")
        except AgentDirInvalid as e:
            if isinstance(e.__context__, ImportError):  # the loader's error hides the cause; its context keeps it
                raise CheckModuleInvalid(f"{e.message} (in {sys.executable})", code="LOUSHO_IMPROVE_CHECK_IMPORT",
                                         hint=IMPORT_HINT) from None
            raise CheckModuleInvalid(e.message) from None
        return _from_module(module, str(source))
    if isinstance(source, ModuleType):
        return _from_module(source, source.__name__)
    if callable(source):
        return CheckModule(check=source, name=getattr(source, "__name__", "check"))
    raise CheckModuleInvalid(f"not a check module: {source!r:.80}")


def module_cases(module: CheckModule) -> list[Case]:
    if module.cases is None:
        return []
    try:
        values = list(module.cases())
    except Exception as e:  # deliberate: user code; one clear error naming the module
        raise CheckRaised(f"{module.name}: cases() raised {type(e).__name__}: {e}") from None
    try:
        cases = [Case.from_value(v, i) for i, v in enumerate(values)]
    except TypeError as e:
        raise CheckModuleInvalid(f"{module.name}: cases(): {e}") from None
    return unique_ids(cases, f"{module.name}: cases()")


def unique_ids(cases: list[Case], where: str) -> list[Case]:
    """Every count of a step is keyed by case id: two cases under one id would be one case run twice as often."""
    seen: set[str] = set()
    for case in cases:
        if case.id in seen:
            raise CheckModuleInvalid(f"{where}: the id {case.id!r} is used twice")
        seen.add(case.id)
    return cases


def _from_module(module: ModuleType, name: str) -> CheckModule:
    check = getattr(module, "check", None)
    if not callable(check):
        raise CheckModuleInvalid(f"{name}: defines no check(input, output) function")
    cases = getattr(module, "cases", None)
    probe = getattr(module, "probe", None)
    read_only = getattr(module, "read_only", None)
    if read_only is not None and (isinstance(read_only, str) or not all(isinstance(t, str) for t in read_only)):
        raise CheckModuleInvalid(f"{name}: read_only must be a list of tool names")
    return CheckModule(check=check, cases=cases if callable(cases) else None, probe=probe if callable(probe) else None,
                       read_only=list(read_only) if read_only is not None else None, name=name)
