"""CLI of the reference agent: ``lousho agent run``; ``lousho runs resume`` and ``lousho runs approve``."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict
from pathlib import Path

import click

from lousho.agent.loop import RunOptions, RunResult
from lousho.agent.runner import AgentSetup, open_agent
from lousho.agent.traffic_route import route
from lousho.models.cli import model_config, model_options
from lousho.models.config import ModelConfig
from lousho.recover.cli import store_option
from lousho.recover.errors import RunNotFound

observe_option = click.option("--observe", "observe_url", envvar="LOUSHO_OBSERVE", default=None,
                              help="Export spans to this observe daemon (http://127.0.0.1:4318) [env LOUSHO_OBSERVE].")
token_option = click.option("--token", envvar="LOUSHO_TOKEN", default=None,
                            help="The daemon's bearer token [env LOUSHO_TOKEN].")


@click.group()
def agent() -> None:
    """The reference tool-calling agent."""


@agent.command("run")
@click.argument("agent_dir", type=click.Path(path_type=Path))
@click.argument("text")
@model_options
@store_option
@observe_option
@token_option
@click.option("--check", "check_path", type=click.Path(path_type=Path), default=None,
              help="A Python file defining check(input, output) -> Verdict; the verdict goes on the run's span.")
@click.option("--run-id", default=None, help="The durable run id (default: a fresh one).")
@click.option("--case", "case_id", default=None, help="The case this run answers (lousho.case.id).")
@click.option("--session", "session_id", default=None,
              help="The session this run belongs to (gen_ai.conversation.id): under a traffic canary or the "
                   "monitor's holdback a session keeps its arm (default: the run id, one session per run).")
@click.option("--lease-seconds", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="If this process dies, `lousho recover` may take the run over this long after its last heartbeat.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def run(agent_dir: Path, text: str, model_url: str | None, model_name: str | None, model_key_env: str,
        model_timeout: float, store_url: str, observe_url: str | None, token: str | None,
        check_path: Path | None, run_id: str | None, case_id: str | None, session_id: str | None,
        lease_seconds: float, as_json: bool) -> None:
    """Run AGENT_DIR once on TEXT, durably: if the process dies, `lousho runs resume RUN_ID` (or a running
    `lousho recover`) finishes it. While a traffic canary runs, the session may be served by the candidate; while
    the monitor's holdback runs, by the base revision."""
    run_id = run_id or f"run-{uuid.uuid4().hex[:16]}"
    # The routed directory is what the run stores, so a resume loads the same harness.
    served = route(agent_dir, session_id or run_id)
    setup = AgentSetup(served.directory, model_config(model_url, model_name, model_key_env, model_timeout),
                       store_url, observe_url, token, check_path, lease_seconds=lease_seconds)
    options = RunOptions(case_id=case_id, traffic_arm=served.arm, session_id=session_id)
    with open_agent(setup, dict(os.environ)) as a:
        result = a.send(text, run_id=run_id, options=options, setup=setup.to_payload())
    _print(result, as_json)


@click.command("resume")
@click.argument("run_id")
@model_options
@store_option
@observe_option
@token_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def resume(run_id: str, model_url: str | None, model_name: str | None, model_key_env: str, model_timeout: float,
           store_url: str, observe_url: str | None, token: str | None, as_json: bool) -> None:
    """Finish an interrupted run from its last checkpoint; completed steps are not repeated."""
    result = _resume(run_id, store_url, model_url, model_name, model_key_env, model_timeout, observe_url, token)
    _print(result, as_json)


@click.command("approve")
@click.argument("run_id")
@click.argument("approval_id")
@click.option("--deny", is_flag=True, help="Deny instead of approve; the model is told a person said no.")
@model_options
@store_option
@observe_option
@token_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def approve(run_id: str, approval_id: str, deny: bool, model_url: str | None, model_name: str | None,
            model_key_env: str, model_timeout: float, store_url: str, observe_url: str | None, token: str | None,
            as_json: bool) -> None:
    """Approve (or --deny) a paused tool call, then resume the run."""
    from lousho.recover.store import open as open_store

    store = open_store(store_url, create=False)
    try:
        approval = store.get_approval(approval_id)
        if approval is None or approval.run_id != run_id:
            from lousho.recover.errors import ApprovalNotFound

            raise ApprovalNotFound(approval_id, store.location)
        store.resolve_approval(approval_id, approved=not deny)
    finally:
        store.close()
    result = _resume(run_id, store_url, model_url, model_name, model_key_env, model_timeout, observe_url, token)
    _print(result, as_json)


def _resume(run_id: str, store_url: str, model_url: str | None, model_name: str | None, model_key_env: str,
            model_timeout: float, observe_url: str | None, token: str | None) -> RunResult:
    from lousho.recover.store import open as open_store

    store = open_store(store_url, create=False)
    try:
        record = store.get_run(run_id)
        if record is None:
            raise RunNotFound(run_id, store.location)
        stored = record.input.get("setup", {}) if isinstance(record.input, dict) else {}
        model = ModelConfig(model_url or stored.get("model_url") or "", model_name or stored.get("model") or "",
                            api_key_env=model_key_env, timeout=model_timeout)
        check = stored.get("check")
        # --observe wins; else the daemon the run was first run with, so its finished attempt lands beside the
        # killed one.
        setup = AgentSetup(Path(stored.get("agent_dir") or record.input.get("agent_dir", "")), model, store_url,
                           observe_url or stored.get("observe_url"), token, Path(check) if check else None)
        with open_agent(setup, dict(os.environ), store=store) as a:
            return a.resume(run_id)
    finally:
        store.close()


def _print(result: RunResult, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(asdict(result), sort_keys=True))
        return
    from lousho.kernel.text_safety import visible

    # The output is the model's text: its control characters (ESC, CR, bidi overrides) are shown as
    # escapes, never obeyed by the terminal; its newlines stay.
    click.echo(visible(f"run {result.run_id}: {result.finish_reason} after {result.steps} step(s)"))
    if result.output is not None:
        click.echo(visible(result.output, newlines=True))
    if result.approval_id:
        click.echo(visible(f"waiting for a person: lousho runs approve {result.run_id} {result.approval_id} [--deny]"))
    if result.error:
        click.echo(visible(f"error {result.error.get('code')}: {result.error.get('message')}", newlines=True))
