"""DESIGN.md §1's dependency arrows, enforced over every import under ``lousho/`` (module level and inside
functions alike: a deferred import is still a dependency).

observe and models import nothing of ours but leaves; analysis reads the store through observe's
client; recover uses models; agent uses recover, models and observe's export helper; improve uses
analysis, agent, models, recover and observe's client; page and plot read observe, analysis, improve
and recover; bench and the demo may use every part. Leaves import nothing of ours but other leaves.
Nothing imports ``lousho/cli.py`` but the entry points.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import lousho

ROOT = Path(lousho.__file__).resolve().parent

# Top-level modules every module may import: each imports nothing of ours but other leaves.
LEAVES = {"lousho", "lousho.kernel._checked_json", "lousho.kernel._child", "lousho.kernel._lazy", "lousho.kernel._listen", "lousho.kernel.cli_support",
          "lousho.kernel.errors", "lousho.kernel.harness_hash", "lousho.kernel.monitor_rule",
          "lousho.kernel.text_safety"}
# May import anything; only these (and each part's __main__) may import lousho.cli.
ENTRY_POINTS = {"lousho.__main__", "lousho.cli", "lousho.observe.entry", "lousho.cli_reference"}
# Top-level modules that belong to a part of their own.
TOP_LEVEL_PARTS = {"lousho.demo.cli": "demo", "lousho.demo.tables": "demo"}

# What observe offers the parts that only read the store: the client (and the package's names that
# resolve to it), the errors it raises, and the SQL of the runs it answers over.
OBSERVE_CLIENT = frozenset({"lousho.observe.client.store_client", "lousho.observe.errors", "lousho.observe.runs.runs_view"})
# What the agent side may use: the OTel export helper (importing it must not load the query stack).
OBSERVE_EXPORT = frozenset({"lousho.observe.client.export"})
ANY = None  # every module of the part

PARTS = ("observe", "models", "analysis", "recover", "agent", "improve", "page", "plot", "bench", "demo")
ARROWS: dict[str, dict[str, frozenset[str] | None]] = {
    "observe": {},
    "models": {},
    "analysis": {"observe": OBSERVE_CLIENT},
    "recover": {"models": ANY},
    "agent": {"recover": ANY, "models": ANY, "observe": OBSERVE_EXPORT},
    "improve": {"analysis": ANY, "agent": ANY, "models": ANY, "recover": ANY, "observe": OBSERVE_CLIENT},
    "page": {"observe": ANY, "analysis": ANY, "improve": ANY, "recover": ANY},
    "plot": {"observe": ANY, "analysis": ANY, "improve": ANY, "recover": ANY},
    "bench": {part: ANY for part in PARTS if part != "bench"},
    "demo": {part: ANY for part in PARTS if part != "demo"},
}

@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT.parent)}:{self.line}: {self.source} imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _package_exports(package: str) -> dict[str, str]:
    """A package's lazily exported names (``_EXPORTS``, name -> module), read from its source."""
    path = MODULES.get(package)
    if path is None or path.name != "__init__.py":
        return {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS"
                                                for t in node.targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict)
            return value
    return {}


def _absolute(source: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = source if MODULES[source].name == "__init__.py" else source.rpartition(".")[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def imports_of(source: str) -> list[Edge]:
    """Every module of ours that ``source`` imports, resolved: ``from pkg import name`` is the submodule
    ``pkg.name`` when there is one, else the module the package's lazy ``name`` comes from, else ``pkg``."""
    path = MODULES[source]
    edges: list[Edge] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(source, node)
            exports = _package_exports(module)
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else exports.get(a.name, module)
                       for a in node.names]
        else:
            continue
        edges += [Edge(source, t, path, node.lineno) for t in targets if t == "lousho" or t.startswith("lousho.")]
    return edges


def part_of(module: str) -> str:
    """``observe`` for lousho.observe.*, ``leaf``, ``entry`` or a top-level part; unknown: fail."""
    if module in LEAVES:
        return "leaf"
    if module in ENTRY_POINTS or module.endswith(".__main__"):
        return "entry"
    if module in TOP_LEVEL_PARTS:
        return TOP_LEVEL_PARTS[module]
    name = module.split(".")[1]
    if name in PARTS:
        return name
    raise AssertionError(f"{module} is in no part: add it to LEAVES, ENTRY_POINTS or TOP_LEVEL_PARTS "
                         "in tests/test_arrows.py (and to DESIGN.md's layout)")


def violation(edge: Edge) -> str | None:
    """Why ``edge`` breaks an arrow, or None when it is allowed."""
    source, target = part_of(edge.source), part_of(edge.target)
    if edge.target == "lousho.cli" and source != "entry":
        return "nothing imports lousho/cli.py but the entry points (use lousho.kernel.cli_support)"
    if source == "entry" or target == "leaf" or source == target:
        return None
    if source == "leaf":
        return "a leaf imports nothing of ours but other leaves"
    if target == "entry":
        return "nothing imports an entry point"
    allowed = ARROWS[source]
    if target not in allowed:
        return f"{source} may import {', '.join(sorted(allowed)) or 'only leaves'}"
    modules = allowed[target]
    if modules is not None and edge.target not in modules:
        return f"{source} may use of {target} only {', '.join(sorted(modules))}"
    return None


def all_edges() -> list[Edge]:
    return [edge for module in MODULES for edge in imports_of(module)]


def test_every_import_follows_the_dependency_arrows():
    broken = [f"{edge}: {why}" for edge in all_edges() if (why := violation(edge)) is not None]
    assert not broken, "imports against DESIGN.md's arrows:\n" + "\n".join(broken)


@pytest.mark.parametrize(("source", "target", "allowed"), [
    ("lousho.observe.client.cli", "lousho.models.client", False),
    ("lousho.models.cli", "lousho.cli", False),
    ("lousho.recover.cli", "lousho.observe.client.render", False),
    ("lousho.analysis.frames", "lousho.observe.store.span_store", False),
    ("lousho.agent.spans", "lousho.observe.client.store_client", False),
    ("lousho.kernel.errors", "lousho.observe.errors", False),
    ("lousho.page.app", "lousho.improve.audit", True),
    ("lousho.page.app", "lousho.agent.loop", False),
    ("lousho.agent.spans", "lousho.observe.client.export", True),
    ("lousho.improve.cycle", "lousho.observe.client.store_client", True),
    ("lousho.bench.heal.runs", "lousho.improve.cycle", True),
    ("lousho.observe.__main__", "lousho.cli", True),
    ("lousho.models.cli", "lousho.kernel.cli_support", True),
    ("lousho.observe.trigger.cycle", "lousho.improve.harness", False),
    ("lousho.observe.client.agent_run", "lousho.kernel.harness_hash", True),
    ("lousho.improve.harness", "lousho.kernel.harness_hash", True),
    ("lousho.observe.entry", "lousho.models.client", True),
    ("lousho.plot.cli", "lousho.agent.directory", False),
    ("lousho.plot.cli", "lousho.improve.harness", True),
])
def test_the_rules_refuse_what_design_forbids(source, target, allowed):
    """The checker itself: each rule of DESIGN.md §1, on an edge that keeps or breaks it (page's
    modules need not exist yet: the rule for lousho/page/ holds before the move)."""
    assert (violation(Edge(source, target, ROOT / "x.py", 1)) is None) is allowed


def test_imports_inside_functions_and_lazy_package_names_count():
    edges = {edge.target for edge in imports_of("lousho.kernel.cli_support")}
    assert "lousho.kernel.text_safety" in edges  # imported inside run()
    exports = _package_exports("lousho.observe")
    assert exports["connect"] == "lousho.observe.client.store_client" and exports["instrument"] == "lousho.observe.client.export"


@pytest.mark.parametrize("module", ["lousho.agent.spans", "lousho.observe.client.export", "lousho.observe",
                                    "lousho.observe.client.agent_run"])
def test_the_agent_side_does_not_load_the_query_stack(module):
    """DESIGN.md §1: importing the agent's export helper must not load DuckDB, Polars or PyArrow (every
    agent and probe process would pay for them)."""
    probe = (f"import sys, {module}; "
             "print(sorted(m for m in ('duckdb', 'polars', 'pyarrow', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
