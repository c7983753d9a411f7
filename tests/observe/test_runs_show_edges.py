"""`lousho runs show` as users meet it: an error's first line once (not a traceback per span), a span that
starts in its parent's millisecond drawn under it, store options after the sub-command; and the page's cost of
a cheap run with its digits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_support import get, sql

from lousho.observe import instrument
from lousho.observe.client.process import start_daemon

TRACEBACK = ("RuntimeError: the order service timed out\n"
             "Traceback (most recent call last):\n"
             '  File "desk/tools.py", line 41, in lookup_order\n'
             "    raise RuntimeError('the order service timed out')\n")
FIRST_LINE = "RuntimeError: the order service timed out"
MS = 1_000_000


def lousho(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True, timeout=120)


def emit(url: str) -> None:
    """One run: the chat span starts 0.3 ms before its parent, in the same millisecond (as a clock of
    millisecond steps, or read in another order, makes it); two tool calls fail with one traceback, which
    the agent span carries too; the chat call costs $0.0000032."""
    from opentelemetry.trace import Status, StatusCode, set_span_in_context

    provider = instrument("desk", url)
    tracer = provider.get_tracer("tests.runs_show")
    t0 = 1_767_000_000_000 * MS + MS // 2
    root = tracer.start_span("invoke_agent desk", start_time=t0, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "desk", "lousho.run.id": "run-edges",
        "gen_ai.input.messages": "where is A-1?"})
    inside = set_span_in_context(root)
    chat = tracer.start_span("chat tiny", context=inside, start_time=t0 - 3 * MS // 10, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "tiny", "gen_ai.usage.input_tokens": 8,
        "gen_ai.usage.output_tokens": 2, "lousho.cost.usd": 0.0000032})
    chat.end(end_time=t0 + 2 * MS)
    for i in range(2):
        tool = tracer.start_span("execute_tool lookup_order", context=inside, start_time=t0 + (3 + i) * MS,
                                 attributes={"gen_ai.operation.name": "execute_tool",
                                             "gen_ai.tool.name": "lookup_order"})
        tool.set_status(Status(StatusCode.ERROR, TRACEBACK))
        tool.end(end_time=t0 + (3 + i) * MS + MS // 2)
    root.set_status(Status(StatusCode.ERROR, TRACEBACK))
    root.end(end_time=t0 + 6 * MS)
    provider.shutdown()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """The run in a store file, with the daemon's page checked while it serves, then stopped (a store file is
    read by one process at a time)."""
    db = tmp_path_factory.mktemp("show") / "o.duckdb"
    daemon = start_daemon(db)
    try:
        emit(daemon.url)
        assert sql(daemon.url, "SELECT count(*) AS n FROM runs WHERE run_id = 'run-edges'") == [{"n": 1}]
        page = get(daemon.url, "/runs/run-edges").body.decode()
        assert "$0.0000032" in page, page[:2000]
    finally:
        assert daemon.stop() == 0
    return db


@pytest.mark.system
def test_runs_show_prints_an_errors_first_line_once_and_draws_a_same_millisecond_child_under_its_parent(store):
    out = lousho("runs", "show", "run-edges", "--db", str(store), "--width", "200")
    assert out.returncode == 0, out.stderr
    tree = out.stdout[out.stdout.index("spans\n"):]
    assert "Traceback" not in out.stdout and "desk/tools.py" not in out.stdout
    assert tree.count(FIRST_LINE) == 1 and tree.count("(same error as above)") == 1, tree
    assert FIRST_LINE in out.stdout[:out.stdout.index("spans\n")]  # the summary's error line
    lines = tree.splitlines()
    [agent] = [line for line in lines if "invoke_agent desk" in line]
    [chat] = [line for line in lines if "chat tiny" in line]
    tools = [line for line in lines if "execute_tool lookup_order" in line]
    assert lines.index(agent) < lines.index(chat) < lines.index(tools[0])
    assert chat.index("chat tiny") > agent.index("invoke_agent") and len(tools) == 2
    assert all(t.index("execute_tool") == chat.index("chat tiny") for t in tools)
    assert FIRST_LINE not in agent and FIRST_LINE in tools[0]  # shown where it arose

    # The whole text stays in --json.
    doc = json.loads(lousho("runs", "show", "run-edges", "--json", "--db", str(store)).stdout)
    assert {s["status_message"] for s in doc["spans"] if s["status_code"] == "ERROR"} == {TRACEBACK}


def _groups() -> list[tuple[str, object]]:
    import click

    from lousho.cli import COMMANDS, EXTRA, LazyGroup

    root = LazyGroup("lousho")
    ctx = click.Context(root)
    found = []
    for name in COMMANDS:
        command = root.get_command(ctx, name)
        if isinstance(command, click.Group) and command.commands:
            own = {n: c for n, c in command.commands.items() if n not in EXTRA.get(name, {})}
            found.append((name, (command, own)))
    return found


@pytest.mark.parametrize(("name", "group"), _groups(), ids=[n for n, _ in _groups()])
def test_every_groups_options_are_taken_after_its_sub_commands_too(name: str, group) -> None:
    """An option of a group applies to its sub-commands, or is declared the group's own listing's."""
    import click

    command, own = group
    listing_only = set(getattr(command, "listing_only", ()))
    for sub_name, sub in own.items():
        taken = {p.name for p in sub.params}
        for option in command.params:
            if isinstance(option, click.Option) and option.name not in listing_only:
                assert option.name in taken, f"lousho {name} {sub_name} refuses {option.opts[0]} after it"


@pytest.mark.system
def test_runs_show_takes_the_store_options_before_or_after_the_sub_command(store, tmp_path):
    for args in (["runs", "show", "run-edges", "--db", str(store), "--json"],
                 ["runs", "--db", str(store), "show", "run-edges", "--json"]):
        out = lousho(*args)
        assert out.returncode == 0, (args, out.stderr)
        assert json.loads(out.stdout)["run"]["run_id"] == "run-edges"
    # Typed after the sub-command, it wins over the group's.
    out = lousho("runs", "--db", str(tmp_path / "missing.duckdb"), "show", "run-edges", "--db", str(store), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["run"]["run_id"] == "run-edges", out.stderr


@pytest.mark.system
def test_the_listings_options_before_a_sub_command_are_refused_not_dropped(store):
    out = lousho("runs", "--db", str(store), "--json", "show", "run-edges")
    assert out.returncode == 2 and "--json before `show` would be ignored" in out.stderr  # it printed the table
    out = lousho("runs", "--db", str(store), "--failed", "--limit", "3", "show", "run-edges")
    assert out.returncode == 2 and "--failed, --limit before `show`" in out.stderr
