"""What every lousho command shares: running a click command the lousho way, and the console tables
print on. The ``lousho`` group (``cli.py``), the ``python -m`` entry points and each part's CLI import
it; nothing imports ``cli.py`` but the entry points.

A leaf: it imports no part, so a part's CLI may use it without an arrow to another part, and it loads
nothing heavy before a command needs it (rich only for a table or an error).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from lousho.kernel.errors import LoushoError, UsageError

if TYPE_CHECKING:
    from rich.console import Console


def run(command: click.Command, args: list[str] | None = None, prog_name: str | None = None) -> None:
    """Run a click command the way every lousho entry point does: a LoushoError prints
    ``error CODE: message`` and its hint, exit 1 (2 for usage errors); no traceback."""
    try:
        command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except LoushoError as e:
        from lousho.kernel.text_safety import visible

        # A message may quote stored or model text (a run id, a span name): shown, never obeyed.
        click.echo(visible(f"error {e.code}: {e.message}", newlines=True), err=True)
        if e.hint:
            click.echo(visible(f"hint: {e.hint}", newlines=True), err=True)
        sys.exit(2 if isinstance(e, UsageError) else 1)


def table_console() -> Console:
    """The console of every table printer: a pipe gets a wide table rather than 80 folded columns, and
    no string is parsed as markup or emoji codes (cells are ``safe_text`` anyway)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200, highlight=False, markup=False, emoji=False)
