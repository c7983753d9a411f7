"""``lousho improve``: one step (writes nothing), or the loop (``--apply``, ``--watch``) and its controls.

``lousho improve DIR ...`` is the step or the loop on DIR; ``lousho improve status|approve|reject|
rollback|audit DIR ...`` act on the loop's state. A first argument that is not a sub-command is DIR.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from lousho.kernel.errors import UsageError
from lousho.models.cli import model_config, model_options


class _DirGroup(click.Group):
    """``lousho improve DIR ...`` runs the ``step`` command; a known sub-command name runs that."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["step", *args]
        return super().parse_args(ctx, args)


# Flags of the step that the loop owns: it keeps its cache in DIR/.lousho/cache, never replays agent runs
# (a write needs fresh evidence) and takes the quoted-check policy from .lousho/improve.json.
STEP_ONLY = {"cache_dir": "--cache-dir", "cached_probe": "--cached-probe", "quoted_checks": "--quoted-checks"}

@click.group("improve", cls=_DirGroup)
def improve() -> None:
    """Propose, test, apply and roll back edits to an agent's instructions and skills.

    \b
    lousho improve DIR --check MODULE            one step: a proposal or keep-base; writes nothing
    lousho improve DIR --check MODULE --apply    one cycle of the loop in the configured mode
    lousho improve DIR --check MODULE --watch    cycles on a timer, the monitor, the guard, rollback
    """


@improve.command("step")
@click.argument("agent_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option("--check", "check_path", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="A Python file defining check(input, output) -> Verdict, and optionally cases() and probe().")
@model_options
@click.option("--editor-model-url", envvar="LOUSHO_EDITOR_MODEL_URL", default=None,
              help="The editors' endpoint (default: the agent's, --model-url) [env LOUSHO_EDITOR_MODEL_URL].")
@click.option("--editor-model", "editor_model_name", envvar="LOUSHO_EDITOR_MODEL", default=None,
              help="The editors' model (default: --model) [env LOUSHO_EDITOR_MODEL].")
@click.option("--observe", "observe", default=None,
              help="Also take cases from failed runs of the live revision in this daemon URL or DuckDB file.")
@click.option("--token", envvar="LOUSHO_TOKEN", default=None, help="The daemon's bearer token [env LOUSHO_TOKEN].")
@click.option("--ca-cert", type=click.Path(path_type=Path, dir_okay=False), envvar="LOUSHO_CA_CERT", default=None,
              help="A PEM certificate to trust for an https --observe daemon [env LOUSHO_CA_CERT].")
@click.option("--proposers", type=click.IntRange(1, 4), default=1, show_default=True,
              help="k invariant and k domain editors (in --mode seq: k rounds).")
@click.option("--mode", type=click.Choice(["default", "seq"]), default="default", show_default=True,
              help="seq: each round edits the last round's checkpoint.")
@click.option("--gate", "gate_name", type=click.Choice(["paired", "seed"]), default="paired", show_default=True,
              help="paired: the case-matched two-stage exact test; seed: the seeds' \"+2 of 3, held-out 2/6\" "
                   "rule. The loop's improve.json key gate, when set, overrides it.")
@click.option("--select", is_flag=True, help="Gate every candidate and let a blind selector pick among passers.")
@click.option("--parallel", is_flag=True, help="Run editors, then their probes, two at a time.")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Replay editor calls with byte-identical requests from here (and count them in its ledger). "
                   "Step only: the loop keeps its cache in DIR/.lousho/cache.")
@click.option("--cached-probe", is_flag=True,
              help="With --cache-dir, also replay probe runs (old evidence). Step only.")
@click.option("--quoted-checks", type=click.Choice(["reject", "flag"]), default="reject", show_default=True,
              help="What to do with an edit that adds a failed check's name. Step only: the loop "
                   "takes quoted_checks from .lousho/improve.json.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the card.")
@click.option("--apply", "apply_", is_flag=True,
              help="Run one cycle of the loop: canary, then apply (auto mode) or queue (manual mode).")
@click.option("--watch", is_flag=True, help="Run the loop on a timer: cycles, guard, monitor, rollback.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=None,
              help="Seconds between watcher ticks (default: interval_seconds of .lousho/improve.json).")
@click.option("--ticks", type=click.IntRange(min=1), default=None, hidden=True, help="Stop after N ticks.")
@click.option("--agent-name", default=None,
              help="The gen_ai.agent.name the agent's runs carry, for --observe and the monitor "
                   "(default: agent.toml's name, else the directory's name).")
def step(agent_dir: Path, check_path: Path, model_url: str | None, model_name: str | None, model_key_env: str,
         model_timeout: float, editor_model_url: str | None, editor_model_name: str | None, observe: str | None,
         token: str | None, ca_cert: Path | None, proposers: int, mode: str, gate_name: str, select: bool,
         parallel: bool,
         cache_dir: Path | None,
         cached_probe: bool, quoted_checks: str, as_json: bool, apply_: bool, watch: bool, interval: float | None,
         ticks: int | None, agent_name: str | None) -> None:
    """One improvement step on AGENT_DIR: propose an edit or keep the base. Writes nothing to AGENT_DIR
    (unless --apply or --watch runs the loop, with the same models, store and search flags).

    Exit 0 for either outcome, 1 when the step could not run.
    """
    from lousho.improve.card import format_improve_result
    from lousho.improve.options import StepOptions
    from lousho.improve.step import improve_agent

    model, editor = _models(model_url, model_name, model_key_env, model_timeout, editor_model_url, editor_model_name)
    options = StepOptions(model=model, editor_model=editor, observe=observe, observe_token=token,
                          observe_ca_cert=ca_cert, agent_name=agent_name, proposers=proposers, mode=mode,  # type: ignore[arg-type]
                          select=select, parallel=parallel, cache_dir=cache_dir, cached_probe=cached_probe,
                          quoted_checks=quoted_checks, gate=gate_name)  # type: ignore[arg-type]
    if apply_ or watch:
        _refuse_step_only(click.get_current_context(), "--watch" if watch else "--apply")
        _loop(agent_dir, check_path, options, as_json, watch, interval, ticks)
        return
    recover_interrupted(agent_dir)
    with _progress(enabled=not as_json and sys.stderr.isatty()) as progress:
        result = improve_agent(agent_dir, check_path, options, environ=dict(os.environ), progress=progress)
    if as_json:
        data = result.to_dict()
        click.echo(json.dumps({k: data[k] for k in ("outcome", "reason", "diff", "cost", "revision", "base_revision",
                                                    "chosen", "flags", "error", "ledger", "decisions")},
                              sort_keys=True))
    else:
        _echo(format_improve_result(result), nl=False)
    if result.could_not_run:
        sys.exit(1)


def _refuse_step_only(ctx: click.Context, loop_flag: str) -> None:
    from click.core import ParameterSource

    from lousho.improve.errors import OptionInvalid

    given = [flag for name, flag in STEP_ONLY.items() if ctx.get_parameter_source(name) != ParameterSource.DEFAULT]
    if given:
        raise OptionInvalid(f"{', '.join(given)} cannot be used with {loop_flag}: the loop sets it itself",
                            code="LOUSHO_IMPROVE_STEP_ONLY_OPTION",
                            hint="the loop keeps its cache in DIR/.lousho/cache, never replays agent runs, and takes "
                                 "quoted_checks from .lousho/improve.json; drop the flag, or run a step without "
                                 f"{loop_flag}")


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[str], None]]:
    if not enabled:
        yield lambda _: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("starting", total=None)
        yield lambda message: bar.update(task, description=message)


def _models(model_url: str | None, model_name: str | None, model_key_env: str, model_timeout: float,
            editor_model_url: str | None, editor_model_name: str | None) -> tuple[Any, Any]:
    model = model_config(model_url, model_name, model_key_env, model_timeout) if model_url or model_name else None
    editor = None
    if editor_model_url or editor_model_name:
        editor = model_config(editor_model_url or model_url, editor_model_name or model_name, model_key_env,
                              model_timeout)
    return model, editor


def _setup(agent_dir: Path, check_path: Path | None, options: Any = None, rate_limit: bool = False) -> Any:
    from lousho.improve.loop_setup import LoopSetup
    from lousho.improve.options import StepOptions

    _check_agent_dir(agent_dir)
    recover_interrupted(agent_dir)
    return LoopSetup(agent_dir, check_path if check_path is not None else _no_check, options or StepOptions(),
                     dict(os.environ), rate_limit=rate_limit)


def _check_agent_dir(agent_dir: Path) -> None:
    if not agent_dir.is_dir():
        raise UsageError(f"{agent_dir}: not a directory", code="LOUSHO_AGENT_DIR_INVALID",
                         hint="pass the harness directory (it holds instructions.md and skills/<name>/SKILL.md)")


def recover_interrupted(agent_dir: Path, *, quiet: bool = False) -> Any:
    """Undo an apply a crash cut short before anything reads the harness (``journal``); says so on stderr."""
    from lousho.improve.journal import recover
    from lousho.improve.state import Paths

    if not agent_dir.is_dir():
        return None
    recovery = recover(Paths(agent_dir))
    if recovery is not None and not quiet:
        _echo_err(f"improve: {recovery.describe()}")
    return recovery


def _echo_err(text: str) -> None:
    from lousho.kernel.text_safety import visible

    click.echo(visible(text, newlines=True), err=True)


def _no_check(input_text: str, output: str | None) -> Any:
    raise UsageError("this action runs the agent and needs --check MODULE", code="LOUSHO_IMPROVE_CHECK_INVALID",
                     hint="pass --check and the model flags")


def _loop(agent_dir: Path, check_path: Path, options: Any, as_json: bool, watch: bool, interval: float | None,
          ticks: int | None) -> None:
    from lousho.improve.cycle import run_cycle
    from lousho.improve.watcher import watch as watch_loop

    options.validate()
    if watch:
        setup = _setup(agent_dir, check_path, options, rate_limit=True)

        def show(t: Any) -> None:
            line = {"action": t.action, "reason": t.reason}
            if as_json:
                click.echo(json.dumps(line, sort_keys=True))
            else:
                _echo(f"tick: {t.action}: {t.reason}")
            sys.stdout.flush()

        watch_loop(setup, ticks=ticks, interval=interval, on_tick=show)
        return
    result = run_cycle(_setup(agent_dir, check_path, options))
    _print_cycle(result, as_json)
    if result.outcome == "error":
        sys.exit(1)


def _print_cycle(result: Any, as_json: bool) -> None:
    from lousho.improve.card import format_improve_result

    if as_json:
        click.echo(json.dumps(result.to_dict(), sort_keys=True))
        return
    if result.step is not None:
        _echo(format_improve_result(result.step), nl=False)
    for check in result.checks:
        _echo(f"{check.name}: {'pass' if check.passed else 'FAIL'}: {check.reason}")
    _echo(f"cycle: {result.outcome}: {result.reason}")


model_flags = model_options


@improve.command("approve")
@click.argument("agent_dir", type=click.Path(path_type=Path, file_okay=False))
@click.argument("proposal_id")
@click.option("--check", "check_path", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The check module (the corpus guard runs after the write).")
@model_flags
@click.option("--json", "as_json", is_flag=True)
def approve(agent_dir: Path, proposal_id: str, check_path: Path, model_url: str | None, model_name: str | None,
            model_key_env: str, model_timeout: float, as_json: bool) -> None:
    """Write a queued proposal: refused when the harness changed since it was made."""
    from lousho.improve.cycle import apply_proposal
    from lousho.improve.options import StepOptions

    model, _ = _models(model_url, model_name, model_key_env, model_timeout, None, None)
    result = apply_proposal(_setup(agent_dir, check_path, StepOptions(model=model)), proposal_id, by="person")
    _print_cycle(result, as_json)
    if result.outcome in ("refused", "paused"):
        sys.exit(1)


@improve.command("reject")
@click.argument("agent_dir", type=click.Path(path_type=Path, file_okay=False))
@click.argument("proposal_id")
def reject(agent_dir: Path, proposal_id: str) -> None:
    """Reject a queued proposal: nothing is written."""
    from lousho.improve.cycle import reject_proposal

    result = reject_proposal(_setup(agent_dir, None), proposal_id)
    _echo(f"{result.outcome}: {result.reason}")
    if result.outcome == "refused":
        sys.exit(1)


@improve.command("rollback")
@click.argument("agent_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option("--to", "to", default=None, help="The saved revision to restore (default: the watched edit's base).")
def rollback_command(agent_dir: Path, to: str | None) -> None:
    """Restore a saved revision through the writer (a new history entry) and start the cooldown."""
    from lousho.improve.cycle import rollback

    result = rollback(_setup(agent_dir, None), to=to, reason="by a person")
    _echo(f"rolled back: the harness is at {result.revision}")


@improve.command("revision")
@click.argument("agent_dir", type=click.Path(path_type=Path, file_okay=False))
def revision_command(agent_dir: Path) -> None:
    """Print the harness revision of AGENT_DIR: the value the loop expects in an agent's
    ``lousho.harness.revision`` (the same as ``lousho.harness_revision(DIR)`` and ``status``)."""
    from lousho.improve.harness import harness_revision

    recover_interrupted(agent_dir)
    click.echo(harness_revision(agent_dir))


@improve.command("status")
@click.argument("agent_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option("--json", "as_json", is_flag=True)
@click.option("--observe", "observe", default=None,
              help="A daemon URL or store file: also list the revisions the agent's runs carry, derived or not.")
@click.option("--token", envvar="LOUSHO_TOKEN", default=None, help="The daemon's bearer token [env LOUSHO_TOKEN].")
@click.option("--agent-name", default=None,
              help="The agent name its runs carry (default: agent.toml's name, else the directory's name).")
def status(agent_dir: Path, as_json: bool, observe: str | None, token: str | None, agent_name: str | None) -> None:
    """The loop's config, state, the watched edit, queued proposals, lessons and the audit chain; with
    --observe, the revisions of the agent's runs (``auto:`` ones derived from what the agent sent)."""
    from dataclasses import asdict

    from lousho.improve import audit, lessons, proposals
    from lousho.improve.controls import kill_switch
    from lousho.improve.harness import read_harness
    from lousho.improve.revisions import saved_revisions
    from lousho.improve.state import Paths, load_config, load_state

    paths = Paths(agent_dir)
    recovery = recover_interrupted(agent_dir, quiet=True)
    # Only the directory's check: status reads files, and the loop's setup would load the gate's statistics
    # (SciPy), three quarters of a second before printing anything.
    _check_agent_dir(agent_dir)
    verdict = audit.verify(paths)
    data = {
        "revision": read_harness(agent_dir).revision, "config": asdict(load_config(paths)),
        "state": load_state(paths).to_dict(), "kill_switch": kill_switch(paths, os.environ),
        "proposals": [{k: p[k] for k in ("id", "status", "revision", "created_at")} for p in proposals.list_all(paths)],
        "lessons": [asdict(le) for le in lessons.load(paths)], "revisions": saved_revisions(paths),
        "audit": {"ok": verdict.ok, "lines": verdict.lines, "reason": verdict.reason},
        "recovery": asdict(recovery) if recovery is not None else None,
        "runs": _run_revisions(agent_dir, observe, token, agent_name) if observe else None,
        "traffic": _traffic_split(paths),
    }
    if as_json:
        click.echo(json.dumps(data, sort_keys=True))
        return
    state = data["state"]
    _echo(f"revision     {data['revision']}")
    _echo(f"mode         {data['config']['approval']}   kill switch: {data['kill_switch'] or 'off'}")
    _echo(f"today        {state['cycles_today']} cycles, {state['tokens_today']} tokens, "
               f"{state['applies_today']} applies; cooldown until {state['cooldown_until'] or '-'}")
    watched = state["watched"] or {}
    _echo(f"watched      {watched.get('after', '-')} ({watched.get('status', '-')})")
    if watched.get("design"):
        _echo(f"monitor      {watched['design']}: {watched.get('design_reason') or '-'}")
    split = data["traffic"]
    if split is not None and split["status"] == "running":
        held = split.get("kind") == "holdback"
        _echo(f"traffic      {split.get('kind', 'canary')} of {split['candidate_revision']} against "
              f"{split['base_revision']}: {'' if held else 'at most '}{split['share']:g} of new sessions on the "
              f"{'base' if held else 'candidate'}, since {split['started_at']}")
    for p in data["proposals"]:
        _echo(f"proposal     {p['id']}  {p['status']}  {p['revision']}")
    _echo(f"lessons      {sum(not le['retired'] for le in data['lessons'])} active, "
               f"{sum(le['retired'] for le in data['lessons'])} retired")
    _echo(f"audit        {'ok' if verdict.ok else 'BROKEN'} ({verdict.lines} lines)")
    if recovery is not None:
        _echo(f"recovered    {recovery.describe()}")
    for r in data["runs"] or []:
        _echo(f"runs         {r['revision'] or '(unversioned)'}  {_SOURCES[r['source']]}  {r['runs']} runs, "
              f"{r['failed']} failed, last {r['last']}")


# How a run's revision was found (runs.revision_source), for a person.
_SOURCES = {"tagged": "tagged (lousho.harness.revision)", "version": "version (gen_ai.agent.version)",
            "derived": "derived (fingerprint of its instructions, tools and model)",
            "none": "unversioned (nothing to fingerprint)"}


def _traffic_split(paths: Any) -> dict[str, Any] | None:
    """The traffic file (a canary or the monitor's holdback, running or the last one) without its per-session
    assignments, which a canary keeps and a person does not need here."""
    from lousho.improve import traffic

    data = traffic.status(paths)
    return None if data is None else {k: v for k, v in data.items() if k != "assignments"}


def _run_revisions(agent_dir: Path, observe: str, token: str | None, name: str | None) -> list[dict[str, Any]]:
    """The revisions the agent's runs carry, newest first (at most five), with how each was found."""
    from lousho.improve.harness import agent_name
    from lousho.observe.client.store_client import connect

    frame = connect(observe, token=token).sql(
        "SELECT harness_revision AS revision, revision_source AS source, count(*) AS runs, "
        "count(*) FILTER (WHERE status = 'error' OR passed = false) AS failed, "
        "strftime(max(started_at), '%Y-%m-%d %H:%M:%S') AS last FROM runs WHERE agent = ? AND NOT probe "
        "GROUP BY ALL ORDER BY max(started_ns) DESC LIMIT 5", [name or agent_name(agent_dir)])
    return frame.to_dicts()


def _echo(text: str, nl: bool = True) -> None:
    """Print text for a person: reasons, cards and proposals quote model and agent text, so control
    characters (ESC, CR, bidi overrides) are shown as escapes; newlines stay (``visible``)."""
    from lousho.kernel.text_safety import visible

    click.echo(visible(text, newlines=True), nl=nl)


def _register_audit() -> None:
    from lousho.improve.audit_cli import audit

    improve.add_command(audit, "audit")


_register_audit()
