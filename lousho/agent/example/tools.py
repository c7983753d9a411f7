"""The example agent's tools. Side effects go to workspace/ inside the agent directory."""

from lousho.agent import ToolContext, tool


@tool("Add a list of numbers and return the sum.")
def add(numbers: list) -> float:
    return sum(float(n) for n in numbers)


@tool("Append one note to the notes file.")
def write_note(text: str, ctx: ToolContext) -> str:
    workspace = ctx.agent_dir / "workspace"
    workspace.mkdir(exist_ok=True)
    with (workspace / "notes.txt").open("a", encoding="utf-8") as f:
        f.write(f"{ctx.call_id}\t{text}\n")
    return f"saved note {text!r}"


@tool("Delete every note.")
def clear_notes(ctx: ToolContext) -> str:
    notes = ctx.agent_dir / "workspace" / "notes.txt"
    count = len(notes.read_text(encoding="utf-8").splitlines()) if notes.exists() else 0
    notes.unlink(missing_ok=True)
    return f"deleted {count} notes"
