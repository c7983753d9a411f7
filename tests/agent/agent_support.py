"""Agent directories for tests, copied from the shipped example and changed where a test needs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import lousho.agent

EXAMPLE = Path(lousho.agent.__file__).parent / "example"

# write_note, but it stops for a long while on "block" while a flag file exists: a test kills the
# process there, mid-tool, and removes the flag before resuming.
BLOCKING_TOOLS = '''
import time
from lousho.agent import ToolContext, tool


@tool("Append one note to the notes file.")
def write_note(text: str, ctx: ToolContext) -> str:
    workspace = ctx.agent_dir / "workspace"
    workspace.mkdir(exist_ok=True)
    with (workspace / "effects.txt").open("a", encoding="utf-8") as f:
        f.write(f"start\\t{ctx.call_id}\\t{text}\\n")
    if text == "block" and (ctx.agent_dir / "block.flag").exists():
        time.sleep(600)
    with (workspace / "effects.txt").open("a", encoding="utf-8") as f:
        f.write(f"done\\t{ctx.call_id}\\t{text}\\n")
    return f"saved note {text!r}"
'''


def copy_example(dest: Path, tools: str | None = None) -> Path:
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__", "workspace"))
    if tools is not None:
        (dest / "tools.py").write_text(tools, encoding="utf-8")
        (dest / "agent.toml").write_text('name = "ledger"\nmodel = "scripted"\nmax_steps = 10\n', encoding="utf-8")
    return dest


def lousho(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True, timeout=timeout)
