"""The editors' file tools, on an in-memory copy of a harness.

An editor model sees four tools (list, read, write, edit) and nothing else: no shell, no network,
no path outside the harness. Every write goes through ``Harness.with_file`` and then the pluggable
``check_write`` (the injection check), so a refused write never lands. A tool call never raises on
the model's input: each failure comes back as text starting ``error: `` that the model can act on,
and leaves the workspace unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from lousho.agent.directory import MAX_INSTRUCTIONS_CHARS
from lousho.improve.harness import INSTRUCTIONS, Harness, HarnessWriteRefused

# check_write(path, before_text, after_text) -> a refusal reason, or None to allow the write.
WriteCheck = Callable[[str, str, str], str | None]


@dataclass(frozen=True)
class WriteAttempt:
    """One write_file or edit_file call that named a path, and whether it landed."""

    tool: str
    path: str
    accepted: bool
    reason: str | None = None


def _function(name: str, description: str, params: dict[str, str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "additionalProperties": False, "required": list(params),
                       "properties": {k: {"type": "string", "description": v} for k, v in params.items()}},
    }}


_PATH = "instructions.md or skills/<name>/SKILL.md"
_SCHEMAS = [
    _function("list_files", "List the harness files with their sizes in characters; read-only ones are marked.", {}),
    _function("read_file", "Return the full text of one harness file.", {"path": _PATH}),
    _function("write_file",
              f"Create or replace one harness file. Only {_PATH} are writable; instructions.md holds at most "
              f"{MAX_INSTRUCTIONS_CHARS} characters; a SKILL.md starts with front matter: ---, "
              "description: <one line>, ---.",
              {"path": _PATH, "content": "the complete new text of the file"}),
    _function("edit_file", "Replace one exact passage of a harness file; `old` must occur exactly once in it.",
              {"path": _PATH, "old": "the exact text to replace, unique in the file",
               "new": "the text to put in its place"}),
]
_ARGS = {s["function"]["name"]: tuple(s["function"]["parameters"]["required"]) for s in _SCHEMAS}


class _ToolError(Exception):
    """A failed tool call; its message is what the model reads after ``error: ``."""


class Workspace:
    """A harness being edited through tool calls; ``base`` is where the edits started."""

    def __init__(self, harness: Harness, check_write: WriteCheck | None = None) -> None:
        self._base = harness
        self._harness = harness
        self._check_write = check_write
        self.writes: list[WriteAttempt] = []

    @property
    def base(self) -> Harness:
        return self._base

    @property
    def harness(self) -> Harness:
        return self._harness

    @property
    def refused(self) -> list[WriteAttempt]:
        return [w for w in self.writes if not w.accepted]

    @staticmethod
    def tool_schemas() -> list[dict[str, Any]]:
        """OpenAI function-tool schemas for list_files, read_file, write_file and edit_file."""
        return copy.deepcopy(_SCHEMAS)

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool call and return the text the model sees; failures start with ``error: ``."""
        try:
            args = _arguments(name, arguments)
            if name == "list_files":
                return self._list_files()
            if name == "read_file":
                return self._text(args["path"])
            if name == "write_file":
                return self._write(name, args["path"], args["content"])
            return self._edit(args["path"], args["old"], args["new"])
        except _ToolError as e:
            return f"error: {e}"

    def _list_files(self) -> str:
        lines = []
        for path, text in self._harness.files.items():
            note = f" of {MAX_INSTRUCTIONS_CHARS} max, always on" if path == INSTRUCTIONS else ""
            mark = " (read-only)" if path in self._harness.read_only else ""
            lines.append(f"{path}: {len(text)} chars{note}{mark}")
        return "\n".join(lines)

    def _text(self, path: str) -> str:
        text = self._harness.files.get(path)
        if text is None:
            raise _ToolError(f"no such file {path!r}; the files are: {', '.join(self._harness.files)}")
        return text

    def _edit(self, path: str, old: str, new: str) -> str:
        try:
            text = self._text(path)
            if not old:
                raise _ToolError("`old` is empty; give the exact text to replace")
            count = text.count(old)
            if count != 1:
                raise _ToolError(f"`old` occurs {count} times in {path}; it must occur exactly once"
                                 + ("; include more of the surrounding text" if count else "; read the file first"))
            if old == new:
                raise _ToolError("`old` and `new` are the same; nothing would change")
        except _ToolError as e:
            self.writes.append(WriteAttempt("edit_file", path, False, str(e)))
            raise
        return self._write("edit_file", path, text.replace(old, new, 1))

    def _write(self, tool: str, path: str, content: str) -> str:
        before = self._harness.files.get(path)
        try:
            candidate = self._harness.with_file(path, content)
        except HarnessWriteRefused as e:
            self._refuse(tool, path, e.message)
        reason = self._check_write(path, before or "", content) if self._check_write else None
        if reason is not None:
            self._refuse(tool, path, f"{path}: {reason}")
        self._harness = candidate
        self.writes.append(WriteAttempt(tool, path, True))
        verb = "created" if before is None else "wrote"
        return f"ok: {verb} {path} ({len(content)} chars)"

    def _refuse(self, tool: str, path: str, reason: str) -> NoReturn:
        self.writes.append(WriteAttempt(tool, path, False, reason))
        raise _ToolError(f"refused: {reason}")


def _arguments(name: object, arguments: object) -> dict[str, str]:
    if not isinstance(name, str) or name not in _ARGS:
        raise _ToolError(f"unknown tool {name!r}; the tools are: {', '.join(_ARGS)}")
    if not isinstance(arguments, Mapping):
        raise _ToolError(f"{name}: arguments must be a JSON object")
    expected = _ARGS[name]
    unknown = sorted(str(k) for k in arguments if k not in expected)
    if unknown:
        raise _ToolError(f"{name}: unexpected arguments {unknown}; it takes {list(expected) or 'none'}")
    missing = [k for k in expected if k not in arguments]
    if missing:
        raise _ToolError(f"{name}: missing arguments {missing}")
    wrong = [k for k in expected if not isinstance(arguments[k], str)]
    if wrong:
        raise _ToolError(f"{name}: arguments {wrong} must be strings")
    return {k: arguments[k] for k in expected}
