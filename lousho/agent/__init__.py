"""agent: the reference tool-calling agent, durable through lousho.recover."""

from lousho.agent.directory import AgentDir, harness_revision, load
from lousho.agent.hooks import Deny, Hint, Hook, Replace, Rewrite, Stop, ToolCallInfo
from lousho.agent.tools import Tool, ToolContext, tool
from lousho.agent.verdict import Verdict

__all__ = [
    "AgentDir", "Deny", "Hint", "Hook", "Replace", "Rewrite", "Stop", "Tool", "ToolCallInfo", "ToolContext",
    "Verdict", "harness_revision", "load", "tool",
]
