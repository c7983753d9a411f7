"""The ``lousho`` command. Each part adds its own sub-commands from its own module."""

from __future__ import annotations

import sys

import click

from lousho.analysis.cli import stats
from lousho.demo import demo
from lousho.errors import LoushoError, UsageError
from lousho.observe.cli import observe, runs, sql


@click.group()
@click.version_option(package_name="lousho")
def group() -> None:
    """A self-healing layer for LLM agents, on OpenTelemetry."""


for command in (observe, sql, runs, stats, demo):
    group.add_command(command)


def main() -> None:
    """Entry point: user-facing errors print one clear line (and a hint), never a traceback."""
    try:
        group.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except LoushoError as e:
        click.echo(f"error {e.code}: {e.message}", err=True)
        if e.hint:
            click.echo(f"hint: {e.hint}", err=True)
        sys.exit(2 if isinstance(e, UsageError) else 1)
