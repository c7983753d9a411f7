"""``lousho bench heal``: run the heal benchmark, or report on its rows."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lousho.bench.heal.errors import AttemptsInvalid, LiveOptionsMissing

if TYPE_CHECKING:
    from lousho.bench.heal.bench import Live


@click.command()
@click.option("--scenarios", default="all", show_default=True,
              help="all, or a comma-separated list of: true-fix, planted-editor, planted-forced, no-op, injection, "
                   "healthy, kill-switch, manual, canary-traffic, budget, stable-monitor, failure-names, layout.")
@click.option("--attempts", default="full", show_default=True,
              help="full (each bar's count: 10, or 5 for true-fix, healthy, canary-traffic; 5 per study condition; "
                   "3 runs a layout case) or a number per scenario.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The JSONL file: one line per attempt, study attempt or layout arm (written; read with --report).")
@click.option("--report", "report_only", is_flag=True,
              help="Print the bars and the verdict of --out; run nothing. Exit 1 on NO-GO or INCOMPLETE.")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the attempt directories go.  [default: OUT's name with .work]")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The observe database.  [default: a fresh one in the work directory]")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds every attempt's draws.")
@click.option("--append", is_flag=True, help="Add rows to --out instead of replacing it.")
@click.option("--live", is_flag=True, help="Run the agent (and the editors) on an OpenAI-compatible endpoint.")
@click.option("--model-url", default=None, help="With --live: the agent model's base URL (.../v1).")
@click.option("--model", default=None, help="With --live: the agent model's name.")
@click.option("--editor-model-url", default=None, help="With --live: the editors' base URL (default: the agent's).")
@click.option("--editor-model", default=None, help="With --live: the editors' model name.")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
              help="The environment variable holding the key (never printed).")
@click.option("--progress/--no-progress", default=None,
              help="A line per attempt on stderr.  [default: when stderr is a terminal]")
def heal(scenarios: str, attempts: str, out: Path, report_only: bool, work: Path | None, db: Path | None, seed: int,
         append: bool, live: bool, model_url: str | None, model: str | None, editor_model_url: str | None,
         editor_model: str | None, api_key_env: str, progress: bool | None) -> None:
    """The heal benchmark: the eleven loop scenarios at full count, the failure-name study and the layout
    check, then a GO / NO-GO report (seed §5, §6)."""
    from lousho.bench.heal.report import report
    from lousho.bench.heal.rows import read_rows

    if report_only:
        text, verdict = report(read_rows(out), str(out))
        click.echo(text, nl=False)
        sys.exit(0 if verdict in ("GO", "GO with misses") else 1)
    from lousho.bench.heal.run import Options, parse_scenarios, run

    options = Options(out=out, work=work or out.with_name(out.name + ".work"), db=db,
                      scenarios=parse_scenarios(scenarios), attempts=_attempts(attempts), seed=seed,
                      live=_live(live, model_url, model, editor_model_url, editor_model, api_key_env),
                      environ=dict(os.environ), append=append)
    show = sys.stderr.isatty() if progress is None else progress
    count = run(options, say=(lambda line: click.echo(line, err=True)) if show else (lambda _: None))
    click.echo(f"wrote {count} rows to {out}; the report: lousho bench heal --report --out {out}")


def _attempts(value: str) -> int | None:
    if value == "full":
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise AttemptsInvalid(f"--attempts {value!r}: expected full or a positive number")
    return count


def _live(live: bool, model_url: str | None, model: str | None, editor_url: str | None, editor: str | None,
          key_env: str) -> Live | None:
    from lousho.bench.heal.bench import Live
    from lousho.models.config import ModelConfig

    given = any(v is not None for v in (model_url, model, editor_url, editor))
    if not live:
        if given:
            raise LiveOptionsMissing("--model-url, --model, --editor-model-url and --editor-model need --live")
        return None
    if not model_url or not model:
        raise LiveOptionsMissing("--live needs --model-url and --model")
    if (editor_url is None) != (editor is None):
        raise LiveOptionsMissing("--editor-model-url and --editor-model go together")
    editor_config = ModelConfig(editor_url, editor, api_key_env=key_env) if editor_url and editor else None
    return Live(ModelConfig(model_url, model, api_key_env=key_env), editor_config)
