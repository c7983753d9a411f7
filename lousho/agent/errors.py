"""Errors of the reference agent: a bad agent directory, an unknown tool, a run that cannot go on."""

from __future__ import annotations

from lousho.kernel.errors import LoushoError, UsageError


class AgentDirInvalid(UsageError):
    """The agent directory cannot be loaded; the message names the file."""

    code = "LOUSHO_AGENT_DIR_INVALID"
    hint = "an agent directory holds agent.toml, instructions.md, optional tools.py and skills/<name>/SKILL.md"


class SkillInvalid(AgentDirInvalid):
    code = "LOUSHO_SKILL_INVALID"
    hint = "a SKILL.md starts with front matter: ---, a line `description: ...`, ---"


class CheckInvalid(AgentDirInvalid):
    """The --check file is missing, fails to load, or defines no check: the run's verdict, not the agent."""

    code = "LOUSHO_AGENT_CHECK_INVALID"
    hint = "--check names a Python file defining check(input, output) that returns a Verdict " \
           "(lousho/agent/example/check.py is one)"


class UnknownTool(LoushoError):
    code = "LOUSHO_AGENT_UNKNOWN_TOOL"
    hint = "the tools the agent knows are listed in the message; check agent.toml and tools.py"


class RunPending(LoushoError):
    """A session's previous turn is unfinished: resume or discard it before the next."""

    code = "LOUSHO_SESSION_TURN_PENDING"
    hint = "resume it (`lousho runs resume RUN_ID`) or discard it (session.discard_pending())"
