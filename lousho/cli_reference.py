"""docs/cli.md, written from the click commands themselves, so the reference cannot drift from the CLI.

    python -m lousho.cli_reference           # rewrite docs/cli.md
    python -m lousho.cli_reference --check   # exit 1 if docs/cli.md is stale (the test suite runs this)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import click

from lousho.cli import DeferredCommand, group

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def render() -> str:
    lines = ["# The lousho command line", "",
             "Written by `python -m lousho.cli_reference` from the commands themselves; "
             "`--check` keeps it current.", ""]
    root = click.Context(group, info_name="lousho")
    for path, command, ctx in _walk(group, root, ["lousho"]):
        if command.hidden:
            continue
        lines += [f"## `{' '.join(path)}`", ""]
        help_text = (command.help or "").split("\b")[0].strip()
        if help_text:
            lines += [" ".join(help_text.split()), ""]
        lines += ["```", command.get_usage(ctx).replace("Usage: ", ""), "```", ""]
        options = [p for p in command.get_params(ctx) if isinstance(p, click.Option) and not p.hidden
                   and p.name != "help" and "--help" not in p.opts]
        for option in options:
            record = option.get_help_record(ctx)
            if record:
                lines.append(f"- `{record[0]}`: {' '.join(record[1].split())}")
        if options:
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _walk(command: click.Command, ctx: click.Context, path: list[str]) -> Iterator[
        tuple[list[str], click.Command, click.Context]]:
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None:
                continue
            if isinstance(sub, DeferredCommand):
                sub = sub.load()
            sub_ctx = click.Context(sub, info_name=name, parent=ctx)
            yield from _walk(sub, sub_ctx, [*path, name])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lousho.cli_reference")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE} is stale: run python -m lousho.cli_reference", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
