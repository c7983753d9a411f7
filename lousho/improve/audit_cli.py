"""``lousho improve audit DIR [--verify]``: list the audit log, or check its hash chain and head."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from lousho.improve.audit import entries, verify
from lousho.improve.journal import recover
from lousho.improve.state import Paths
from lousho.kernel.errors import UsageError

_SHOWN = ("seq", "at", "action", "prev")
_VALUE_WIDTH = 60


class AgentDirMissing(UsageError):
    code = "LOUSHO_IMPROVE_AUDIT_NO_DIR"
    hint = "give the agent directory (the one holding .lousho/)"


@click.command("audit")
@click.argument("agent_dir")
@click.option("--verify", "check", is_flag=True, help="Check the hash chain and the head; exit 1 if broken.")
def audit(agent_dir: str, check: bool) -> None:
    """List the audit log of AGENT_DIR, one entry a line, or check it with --verify."""
    # A typo'd directory must not read as "ok (0 lines)": an audit that checked nothing says so.
    if not Path(agent_dir).is_dir():
        raise AgentDirMissing(f"{agent_dir}: no such directory")
    paths = Paths(Path(agent_dir))
    # An apply cut short is undone (and logged) first: the log then says what the harness holds.
    recovery = recover(paths)
    if recovery is not None:
        click.echo(f"audit: recovered an interrupted write: {recovery.describe()}")
    if check:
        verdict = verify(paths)
        if recovery is not None and recovery.outcome == "apply-unrecoverable":
            click.echo(f"audit: BROKEN: the harness is not a whole revision: {recovery.reason}")
            raise SystemExit(1)
        if verdict.ok:
            click.echo(f"audit: ok ({verdict.lines} lines)")
            return
        where = f" at line {verdict.first_bad}" if verdict.first_bad is not None else ""
        click.echo(f"audit: BROKEN{where}: {verdict.reason}")
        raise SystemExit(1)
    rows = entries(paths)
    if not rows:
        click.echo("audit: no entries")
    for entry in rows:
        click.echo(format_entry(entry))


def format_entry(entry: dict[str, Any]) -> str:
    """``seq at action key=value ...``; values as JSON (so control characters print escaped), cut short."""
    head = " ".join(_bare(entry.get(key, "?")) for key in _SHOWN[:3])
    rest = " ".join(f"{key}={_short(entry[key])}" for key in sorted(entry) if key not in _SHOWN)
    return f"{head} {rest}".rstrip()


def _bare(value: Any) -> str:
    # A tampered line may hold terminal escapes: anything not printable is shown as JSON.
    return value if isinstance(value, str) and value.isprintable() else _short(value)


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= _VALUE_WIDTH else text[: _VALUE_WIDTH - 3] + "..."


if __name__ == "__main__":
    from lousho.kernel.cli_support import run

    run(audit, prog_name="lousho improve audit")
