"""The ``load_skill`` tool: skills are listed in the prompt and read in full only when asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lousho.agent.tools import Tool, make_tool

if TYPE_CHECKING:
    from lousho.agent.directory import Skill


def load_skill_tool(skills: tuple[Skill, ...]) -> Tool:
    by_name = {s.name: s for s in skills}

    def load_skill(name: str) -> str:
        skill = by_name.get(name)
        if skill is None:
            return f"error: no skill named {name!r}; the skills are {sorted(by_name)}"
        return skill.content

    return make_tool(load_skill, "Read one of the available skills by name.", read_only=True)
