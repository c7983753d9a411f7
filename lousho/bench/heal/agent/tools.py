"""The coding agent's tools: list, read and write the files of this run's own copy of the project.

Before each run the benchmark puts a fresh copy of the project at ``workspace/runs/<run>/`` in the
agent directory, where ``<run>`` is the run id up to its first ``.`` (a sub-agent call of the product
layout works on its parent run's copy). No tool reaches outside that copy: paths are relative, and a
path that resolves elsewhere (``..``, an absolute path, a symlink out) is refused.
"""

from __future__ import annotations

from pathlib import Path

from lousho.agent import ToolContext, tool


@tool("List the files of the project, one relative path a line.")
def list_files(ctx: ToolContext) -> str:
    root = _project(ctx)
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                   and "__pycache__" not in p.parts)
    return "\n".join(files)


@tool("Return the full text of one project file, by its path relative to the project (e.g. calc/text.py).")
def read_file(path: str, ctx: ToolContext) -> str:
    target = _inside(_project(ctx), path)
    if not target.is_file():
        raise FileNotFoundError(f"no such file {path!r}; call list_files to see the files")
    return target.read_text(encoding="utf-8")


@tool("Create or replace one project file with the complete new text.")
def write_file(path: str, content: str, ctx: ToolContext) -> str:
    target = _inside(_project(ctx), path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"wrote {len(content)} characters to {path}"


def _project(ctx: ToolContext) -> Path:
    root = (ctx.agent_dir / "workspace" / "runs" / ctx.run_id.split(".")[0]).resolve()
    if not root.is_dir():
        raise FileNotFoundError("this run has no copy of the project")
    return root


def _inside(root: Path, path: str) -> Path:
    target = (root / path).resolve()
    if not path or Path(path).is_absolute() or root not in target.parents:
        raise PermissionError(f"{path!r} is outside the project; use a path like calc/text.py")
    return target
