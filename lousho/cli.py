"""The ``lousho`` command. Each part adds its own sub-commands from its own module.

Sub-commands are imported when they are called, not before: `lousho stats` need not load DuckDB and
gRPC, and `lousho observe` need not load SciPy.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from lousho.kernel.cli_support import run

# name -> "module:attribute"
COMMANDS = {
    "observe": "lousho.observe.entry:observe",  # the daemon wired with what observe cannot import
    "sql": "lousho.observe.client.cli:sql",
    "runs": "lousho.observe.client.cli:runs",
    "sessions": "lousho.observe.client.sessions_cli:sessions",
    "lake": "lousho.observe.lake.lake_cli:lake",
    "stats": "lousho.analysis.cli:stats",
    "agent": "lousho.agent.cli:agent",
    "models": "lousho.models.cli:models",
    "recover": "lousho.recover.cli:recover_command",
    "demo": "lousho.demo.cli:demo",
    "improve": "lousho.improve.cli:improve",
    "plot": "lousho.plot.cli:plot",
    "bench": "lousho.bench.cli:bench",
}
# Sub-commands other parts add to a group (observe owns `runs`; it must not import recover or agent),
# name -> "module:attribute". They load when used: listing runs does not import the agent loop.
EXTRA = {
    "runs": {"pending": "lousho.recover.cli:pending", "outage": "lousho.recover.cli:outage",
             "resume": "lousho.agent.cli:resume", "approve": "lousho.agent.cli:approve"},
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        command = _load(target)
        if isinstance(command, click.Group):
            for name, extra in EXTRA.get(cmd_name, {}).items():
                command.add_command(DeferredCommand(name, extra), name)
        return command


class DeferredCommand(click.Command):
    """A sub-command whose module loads when it runs or its help is shown, not when its group loads."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name)
        self.target = target

    def load(self) -> click.Command:
        return _load(self.target)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        return self.load().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        return self.load().invoke(ctx)

    def get_short_help_str(self, limit: int = 45) -> str:
        return self.load().get_short_help_str(limit)


def _load(target: str) -> click.Command:
    module, attribute = target.split(":")
    command = getattr(importlib.import_module(module), attribute)
    assert isinstance(command, click.Command)
    return command


@click.group(cls=LazyGroup)
@click.version_option(package_name="lousho")
def group() -> None:
    """A self-healing layer for LLM agents, on OpenTelemetry."""


def main() -> None:
    """Entry point: user-facing errors print one clear line (and a hint), never a traceback."""
    if sys.argv[1:2] == ["observe"]:
        from lousho.observe import memory_cap

        memory_cap.before_duckdb_loads()  # the daemon's process: before its command table loads DuckDB
    run(group)
