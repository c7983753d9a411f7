"""The agent directory: agent.toml, instructions.md, tools.py and skills/<name>/SKILL.md.

The harness the improve loop may edit is instructions.md plus the skills; its revision is a content
hash of exactly those files, so two runs on the same revision saw the same instructions. Loading
executes tools.py: load only directories you trust.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lousho.agent.errors import AgentDirInvalid, SkillInvalid
from lousho.agent.hooks import Hook
from lousho.agent.tools import Tool, ToolSet, make_tool
from lousho.kernel.harness_hash import MAX_INSTRUCTIONS_CHARS, SKILL_NAME

DEFAULT_MAX_STEPS = 10
_KEYS = {"name", "model", "max_steps", "tools", "approval", "description", "progress_guard", "hooks"}


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    content: str
    path: Path


@dataclass(frozen=True)
class AgentDir:
    path: Path
    name: str
    model: str
    max_steps: int
    instructions: str
    skills: tuple[Skill, ...]
    tools: ToolSet = field(compare=False)
    approval: frozenset[str] = frozenset()
    hooks: tuple[Hook, ...] = field(default=(), compare=False)

    @property
    def revision(self) -> str:
        return harness_revision(self.path)

    def system_prompt(self) -> str:
        if not self.skills:
            return self.instructions
        lines = [f"- {s.name}: {s.description}" for s in self.skills]
        return (f"{self.instructions.rstrip()}\n\n## Available skills\n" + "\n".join(lines)
                + "\nCall load_skill with a skill's name to read it before you use it.\n")

    def needs_approval(self, tool: Tool) -> bool:
        return tool.needs_approval or tool.name in self.approval


def load(path: Path | str) -> AgentDir:
    """Load and check an agent directory; every problem is an AgentDirInvalid naming the file."""
    root = Path(path)
    if not root.is_dir():
        raise AgentDirInvalid(f"{root}: not a directory")
    config = _config(root / "agent.toml")
    instructions_path = root / "instructions.md"
    if not instructions_path.is_file():
        raise AgentDirInvalid(f"{instructions_path}: missing")
    instructions = instructions_path.read_text(encoding="utf-8")
    if not instructions.strip():
        raise AgentDirInvalid(f"{instructions_path}: empty")
    if len(instructions) > MAX_INSTRUCTIONS_CHARS:
        raise AgentDirInvalid(
            f"{instructions_path}: {len(instructions)} characters, over the {MAX_INSTRUCTIONS_CHARS} limit",
            hint="move detail into skills, which load only when the model asks for them")
    skills = tuple(_skills(root))
    tools = _tools(root, config)
    if skills:
        tools.add(load_skill_tool(skills))
    approval = config.get("approval", [])
    if not isinstance(approval, list) or not all(isinstance(a, str) for a in approval):
        raise AgentDirInvalid(f"{root / 'agent.toml'}: approval must be a list of tool names")
    unknown = sorted(set(approval) - set(tools.tools))
    if unknown:
        raise AgentDirInvalid(f"{root / 'agent.toml'}: approval names unknown tools {unknown}",
                              hint=f"known tools: {sorted(tools.tools)}")
    max_steps = config.get("max_steps", DEFAULT_MAX_STEPS)
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise AgentDirInvalid(f"{root / 'agent.toml'}: max_steps must be a positive integer")
    return AgentDir(
        path=root.resolve(), name=str(config.get("name", root.resolve().name)),
        model=str(config.get("model", "")), max_steps=max_steps, instructions=instructions,
        skills=skills, tools=tools, approval=frozenset(approval), hooks=_hooks(root, config),
    )


def harness_revision(root: Path) -> str:
    """Content hash of instructions.md and every skills/*/SKILL.md (paths and bytes), 16 hex chars."""
    digest = hashlib.sha256()
    files = [root / "instructions.md", *sorted((root / "skills").glob("*/SKILL.md"))]
    for f in files:
        if f.is_file():
            digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise AgentDirInvalid(f"{path}: missing")
    try:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise AgentDirInvalid(f"{path}: not valid TOML: {e}") from None
    for key in config:
        if key not in _KEYS:
            close = difflib.get_close_matches(key, _KEYS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {sorted(_KEYS)}"
            raise AgentDirInvalid(f"{path}: unknown key {key!r}", hint=hint)
    return config


def _skills(root: Path) -> list[Skill]:
    folder = root / "skills"
    if not folder.is_dir():
        return []
    skills = []
    for entry in sorted(folder.iterdir()):
        if not entry.is_dir():
            continue
        path = entry / "SKILL.md"
        if not path.is_file():
            raise SkillInvalid(f"{entry}: a skill folder needs a SKILL.md")
        if not SKILL_NAME.match(entry.name):
            raise SkillInvalid(f"{entry}: skill names are lowercase letters, digits, - and _")
        meta, body = _front_matter(path)
        description = meta.get("description", "").strip()
        if not description:
            raise SkillInvalid(f"{path}: no description in its front matter")
        skills.append(Skill(meta.get("name", entry.name), description, body, path))
    return skills


def _front_matter(path: Path) -> tuple[dict[str, str], str]:
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        raise SkillInvalid(f"{path}: front matter is not closed with ---")
    meta = {}
    for line in text[3:end].strip().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip().strip('"').strip("'")
    return meta, text[end + 4:].lstrip("\n")


def _hooks(root: Path, config: dict[str, Any]) -> tuple[Hook, ...]:
    """``hooks = "hooks.py"`` (a module defining ``hooks() -> list[Hook]``), then the progress guard
    when ``progress_guard = N`` (its max denials) is set: last, so it sees every other hook's verdict."""
    hooks: list[Hook] = []
    if "hooks" in config:
        module = exec_module(root / str(config["hooks"]), "hooks")
        factory = getattr(module, "hooks", None)
        if not callable(factory):
            raise AgentDirInvalid(f"{root / str(config['hooks'])}: defines no hooks() function")
        made = factory()
        if not isinstance(made, list | tuple) or not all(isinstance(h, Hook) for h in made):
            raise AgentDirInvalid(f"{root / str(config['hooks'])}: hooks() must return a list of Hook")
        hooks.extend(made)
    guard = config.get("progress_guard", False)
    if guard is not False:
        if isinstance(guard, bool) or not isinstance(guard, int) or guard < 0:
            raise AgentDirInvalid(f"{root / 'agent.toml'}: progress_guard is the max denials, an integer >= 0",
                                  hint="progress_guard = 3 (the default of the source documents)")
        from lousho.agent.progress import progress_guard

        hooks.append(progress_guard(max_denials=guard))
    return tuple(hooks)


def exec_module(path: Path, what: str) -> Any:
    """Execute a Python file of the agent directory; any failure is one AgentDirInvalid naming it."""
    if not path.is_file():
        raise AgentDirInvalid(f"{path}: {what} module missing")
    spec = importlib.util.spec_from_file_location(f"lousho_agent_{what}_{abs(hash(path))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # deliberate: any failure of user code becomes one clear error naming the file
        raise AgentDirInvalid(f"{path}: failed to load: {type(e).__name__}: {e}") from None
    return module


def _tools(root: Path, config: dict[str, Any]) -> ToolSet:
    tools = ToolSet()
    name = config.get("tools", "tools.py")
    path = root / str(name)
    if "tools" not in config and not path.exists():
        return tools
    module = exec_module(path, "tools")
    for value in vars(module).values():
        marked = getattr(value, "__lousho_tool__", None)
        if isinstance(marked, Tool):
            tools.add(marked)
    return tools


def load_skill_tool(skills: tuple[Skill, ...]) -> Tool:
    """The ``load_skill`` tool: skills are listed in the prompt and read in full only when asked for."""
    by_name = {s.name: s for s in skills}

    def load_skill(name: str) -> str:
        skill = by_name.get(name)
        if skill is None:
            return f"error: no skill named {name!r}; the skills are {sorted(by_name)}"
        return skill.content

    return make_tool(load_skill, "Read one of the available skills by name.", read_only=True)
