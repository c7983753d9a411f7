"""DESIGN.md §1's dependency arrows, enforced over every import under ``lousho/`` (module level and inside
functions alike: a deferred import is still a dependency).

observe and models import nothing of ours but leaves; analysis reads the store through observe's
client; recover uses models; agent uses recover, models and observe's export helper; improve uses
analysis, agent, models, recover and observe's client; page and plot read observe, analysis, improve
and recover; bench and the demo may use every part. Leaves (the kernel, ``lousho/kernel/``) import
nothing of ours but other leaves. Nothing imports ``lousho/cli.py`` but the entry points.

Within observe, the rooms follow a span's walk (docs/architecture.md): receive -> decode -> store -> runs,
and sql reads store and runs; runs and store never import receive; the client side imports nothing of
the daemon's (receive, decode, trigger, the writer, the metrics, the daemon's assembly).
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

# Every module may import these: the package's face and the shared kernel, which imports nothing of ours but itself.
LEAVES = {"lousho"}
KERNEL = "lousho.kernel"
# May import anything; only these (and each part's __main__) may import lousho.cli.
ENTRY_POINTS = {"lousho.__main__", "lousho.cli", "lousho.observe.entry", "lousho.cli_reference"}

# What observe offers the parts that only read the store: the client (and the package's names that
# resolve to it), the errors it raises, and the SQL of the runs it answers over.
OBSERVE_CLIENT = frozenset({"lousho.observe.client.store_client", "lousho.observe.errors",
                            "lousho.observe.runs.runs_view"})
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

# observe's rooms (its sub-packages) and the rooms each may import. The decoded batch (``Decoded``, the
# native decoder's columns) is what the store appends, so the store reads decode, never receive; the HTTP
# app serves the SQL API's route, so receive reads sql.
ROOMS: dict[str, frozenset[str]] = {
    "receive": frozenset({"decode", "store", "runs", "sql", "lake"}),
    "decode": frozenset({"store", "runs"}),
    "store": frozenset({"decode", "runs"}),
    "runs": frozenset(),
    "sql": frozenset({"store", "runs"}),
    "trigger": frozenset({"sql"}),
    "client": frozenset({"sql", "store", "runs", "lake"}),
    "lake": frozenset({"sql", "runs"}),
}
# Modules directly in lousho/observe/: what every room may import, and the daemon's assembly (which may
# import every room, and which no room imports).
OBSERVE_SHARED = frozenset({"lousho.observe", "lousho.observe.errors", "lousho.observe.config",
                            "lousho.observe.tls_dates", "lousho.observe.metrics", "lousho.observe.memory_cap"})
OBSERVE_ASSEMBLY = frozenset({"lousho.observe.__main__", "lousho.observe.daemon", "lousho.observe.daemon_cli",
                              "lousho.observe.entry"})
# The daemon's own modules, which the client side must not import (it would load the daemon).
DAEMON = frozenset({"receive", "decode", "trigger"})
DAEMON_MODULES = OBSERVE_ASSEMBLY | {"lousho.observe.metrics", "lousho.observe.store.writer",
                                     "lousho.observe.store.writer_upkeep"}

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


def imports_of(source: str, text: str | None = None) -> list[Edge]:
    """Every module of ours that ``source`` (or ``text`` in its place) imports, resolved: ``from pkg import name``
    is the submodule ``pkg.name`` when there is one, else the module the package's lazy ``name`` comes from, else
    ``pkg``."""
    path = MODULES[source]
    text = path.read_text(encoding="utf-8") if text is None else text
    edges: list[Edge] = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
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
    if module in LEAVES or module == KERNEL or module.startswith(KERNEL + "."):
        return "leaf"
    if module in ENTRY_POINTS or module.endswith(".__main__"):
        return "entry"
    name = module.split(".")[1]
    if name in PARTS:
        return name
    raise AssertionError(f"{module} is in no part: move it into a part or the kernel, or add it to ENTRY_POINTS "
                         "in tests/test_arrows.py (and to DESIGN.md's layout)")


def room_of(module: str) -> str:
    """The observe room of ``module`` (lousho.observe.<room>.*), ``shared`` or ``assembly``; unknown: fail."""
    if module in OBSERVE_SHARED:
        return "shared"
    if module in OBSERVE_ASSEMBLY:
        return "assembly"
    name = module.split(".")[2]
    if name in ROOMS:
        return name
    raise AssertionError(f"{module} is in no room of observe: move it into one, or add it to OBSERVE_SHARED or "
                         "OBSERVE_ASSEMBLY in tests/test_arrows.py (and to docs/architecture.md)")


def room_violation(edge: Edge) -> str | None:
    """Why an edge inside observe breaks the rooms' arrows, or None when it is allowed."""
    source, target = room_of(edge.source), room_of(edge.target)
    if source == "client" and (target in DAEMON or edge.target in DAEMON_MODULES):
        return "the client side imports nothing of the daemon's"
    if source == target or source == "assembly" or target == "shared":
        return None
    if target == "assembly":
        return "no room imports the daemon's assembly"
    if source == "shared":
        return "observe's shared modules import no room"
    if target not in ROOMS[source]:
        return f"{source} may import {', '.join(sorted(ROOMS[source])) or 'no other room'} of observe"
    return None


def violation(edge: Edge) -> str | None:
    """Why ``edge`` breaks an arrow, or None when it is allowed."""
    source, target = part_of(edge.source), part_of(edge.target)
    if edge.target == "lousho.cli" and source != "entry":
        return "nothing imports lousho/cli.py but the entry points (use lousho.kernel.cli_support)"
    if source == target == "observe":
        return room_violation(edge)
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
    ("lousho.kernel.errors", "lousho.kernel.text_safety", True),
    ("lousho.kernel.harness_hash", "lousho.improve.harness", False),
    ("lousho.demo.cli", "lousho.improve.cycle", True),
    # observe's rooms
    ("lousho.observe.receive.http_app", "lousho.observe.store.writer", True),
    ("lousho.observe.receive.grpc_server", "lousho.observe.decode.otlp_native", True),
    ("lousho.observe.sql.query", "lousho.observe.runs.runs_view", True),
    ("lousho.observe.sql.query", "lousho.observe.store.span_store", True),
    ("lousho.observe.store.span_store", "lousho.observe.runs.runs_table", True),
    ("lousho.observe.store.writer", "lousho.observe.metrics", True),
    ("lousho.observe.daemon", "lousho.observe.receive.http_app", True),
    ("lousho.observe.client.store_client", "lousho.observe.sql.query", True),
    ("lousho.observe.runs.runs_table", "lousho.observe.receive.http_app", False),
    ("lousho.observe.runs.conventions", "lousho.observe.store.schema", False),
    ("lousho.observe.store.span_store", "lousho.observe.receive.grpc_server", False),
    ("lousho.observe.store.writer", "lousho.observe.sql.query", False),
    ("lousho.observe.sql.query", "lousho.observe.receive.http_app", False),
    ("lousho.observe.sql.query", "lousho.observe.trigger.cycle", False),
    ("lousho.observe.client.store_client", "lousho.observe.trigger.cycle", False),
    ("lousho.observe.client.cli", "lousho.observe.daemon", False),
    ("lousho.observe.client.cli", "lousho.observe.store.writer", False),
    ("lousho.observe.client.render", "lousho.observe.decode.otlp_decode", False),
    ("lousho.observe.client.process", "lousho.observe.receive.http_layers", False),
    ("lousho.observe.receive.http_app", "lousho.observe.daemon", False),
    ("lousho.observe.errors", "lousho.observe.store.span_store", False),
])
def test_the_rules_refuse_what_design_forbids(source, target, allowed):
    """The checker itself: each rule of DESIGN.md §1, on an edge that keeps or breaks it (page's
    modules need not exist yet: the rule for lousho/page/ holds before the move)."""
    assert (violation(Edge(source, target, ROOT / "x.py", 1)) is None) is allowed


@pytest.mark.parametrize(("module", "planted"), [
    ("lousho.observe.runs.runs_view", "from lousho.observe.receive import http_app"),
    ("lousho.observe.store.schema", "from lousho.observe.receive.grpc_server import start_grpc"),
    ("lousho.observe.client.render", "import lousho.observe.trigger.cycle"),
    ("lousho.observe.sql.sql_guard", "    from lousho.observe.receive import http_layers"),
])
def test_a_planted_back_arrow_in_a_real_module_is_refused(module, planted):
    """The whole check on a module's real source with one import added (inside a function too): only the
    planted line breaks an arrow."""
    source = MODULES[module].read_text(encoding="utf-8")
    source += f"\n\ndef _planted():\n{planted}\n" if planted.startswith(" ") else f"\n{planted}\n"
    broken = [edge for edge in imports_of(module, source) if violation(edge) is not None]
    assert [edge.line for edge in broken] == [len(source.splitlines())], [str(e) for e in broken]


def test_the_package_root_and_observe_hold_only_the_listed_modules():
    """The root: the face, the entry and the CLI reference (the kernel and the parts are packages); observe: its
    shared modules and the daemon's assembly beside the rooms."""
    loose = {module_name(p) for p in ROOT.glob("*.py")}
    assert loose == {"lousho", "lousho.__main__", "lousho.cli", "lousho.cli_reference"}
    flat = {module_name(p) for p in (ROOT / "observe").glob("*.py")}
    assert flat == OBSERVE_SHARED | OBSERVE_ASSEMBLY
    assert {p.name for p in (ROOT / "observe").iterdir() if (p / "__init__.py").exists()} == set(ROOMS)


def test_imports_inside_functions_and_lazy_package_names_count():
    edges = {edge.target for edge in imports_of("lousho.kernel.cli_support")}
    assert "lousho.kernel.text_safety" in edges  # imported inside run()
    exports = _package_exports("lousho.observe")
    assert exports["connect"] == "lousho.observe.client.store_client"
    assert exports["instrument"] == "lousho.observe.client.export"


@pytest.mark.parametrize("module", ["lousho.agent.spans", "lousho.observe.client.export", "lousho.observe",
                                    "lousho.observe.client.agent_run"])
def test_the_agent_side_does_not_load_the_query_stack(module):
    """DESIGN.md §1: importing the agent's export helper must not load DuckDB, Polars or PyArrow (every
    agent and probe process would pay for them)."""
    probe = (f"import sys, {module}; "
             "print(sorted(m for m in ('duckdb', 'polars', 'pyarrow', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
