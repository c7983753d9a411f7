"""``lousho improve DIR --check MODULE``: one step; prints the card (or JSON) and writes nothing."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from lousho.models.cli import model_config, model_options


@click.command("improve")
@click.argument("agent_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option("--check", "check_path", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="A Python file defining check(input, output) -> Verdict, and optionally cases() and probe().")
@model_options
@click.option("--editor-model-url", default=None, help="The editors' endpoint (default: the agent's, --model-url).")
@click.option("--editor-model", "editor_model_name", default=None, help="The editors' model (default: --model).")
@click.option("--observe", "observe", default=None,
              help="Also take cases from failed runs of the live revision in this daemon URL or DuckDB file.")
@click.option("--token", envvar="LOUSHO_TOKEN", default=None, help="The daemon's bearer token [env LOUSHO_TOKEN].")
@click.option("--proposers", type=click.IntRange(1, 4), default=1, show_default=True,
              help="k invariant and k domain editors (in --mode seq: k rounds).")
@click.option("--mode", type=click.Choice(["default", "seq"]), default="default", show_default=True,
              help="seq: each round edits the last round's checkpoint.")
@click.option("--select", is_flag=True, help="Gate every candidate and let a blind selector pick among passers.")
@click.option("--parallel", is_flag=True, help="Run editors, then their probes, two at a time.")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Replay editor calls with byte-identical requests from here (and count them in its ledger).")
@click.option("--cached-probe", is_flag=True, help="With --cache-dir, also replay probe runs (old evidence).")
@click.option("--quoted-checks", type=click.Choice(["reject", "flag"]), default="reject", show_default=True,
              help="What to do with an edit that adds a failed check's name.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the card.")
def improve(agent_dir: Path, check_path: Path, model_url: str | None, model_name: str | None, model_key_env: str,
            model_timeout: float, editor_model_url: str | None, editor_model_name: str | None, observe: str | None,
            token: str | None, proposers: int, mode: str, select: bool, parallel: bool, cache_dir: Path | None,
            cached_probe: bool, quoted_checks: str, as_json: bool) -> None:
    """One improvement step on AGENT_DIR: propose an edit or keep the base. Writes nothing to AGENT_DIR.

    Exit 0 for either outcome, 1 when the step could not run.
    """
    from lousho.improve.card import format_improve_result
    from lousho.improve.step import improve_agent

    model = model_config(model_url, model_name, model_key_env, model_timeout) if model_url or model_name else None
    editor = None
    if editor_model_url or editor_model_name:
        editor = model_config(editor_model_url or model_url, editor_model_name or model_name, model_key_env,
                              model_timeout)
    with _progress(enabled=not as_json and sys.stderr.isatty()) as progress:
        result = improve_agent(agent_dir, check_path, model=model, editor_model=editor, observe=observe,
                               observe_token=token, proposers=proposers, mode=mode,  # type: ignore[arg-type]
                               select=select, parallel=parallel, cache_dir=cache_dir, cached_probe=cached_probe,
                               quoted_checks=quoted_checks,  # type: ignore[arg-type]
                               environ=dict(os.environ), progress=progress)
    if as_json:
        data = result.to_dict()
        click.echo(json.dumps({k: data[k] for k in ("outcome", "reason", "diff", "cost", "revision", "base_revision",
                                                    "chosen", "flags", "error", "ledger", "decisions")},
                              sort_keys=True))
    else:
        click.echo(format_improve_result(result), nl=False)
    if result.could_not_run:
        sys.exit(1)


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[str], None]]:
    if not enabled:
        yield lambda _: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("starting", total=None)
        yield lambda message: bar.update(task, description=message)
