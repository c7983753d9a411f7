"""Span text reaches the terminal as text: `lousho runs show`, `lousho runs` and `lousho sql` tables
never parse it as markup and never pass its control characters (ESC, BEL, CR, backspace, C1, bidi
overrides) through; the machine formats keep it exact."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opentelemetry.trace import Status, StatusCode

from lousho.kernel.text_safety import safe_text, visible
from lousho.observe import instrument, record_score

RUN_ID = "hostile-run"
CLOSE = "[/]"
LINK = "[link=https://evil.example]click[/link]"
OSC8 = "\x1b]8;;https://evil.example\x07hidden\x1b]8;;\x07"
TITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J"
OVERWRITE = "ok\rFAILED\x08\x08"
BIDI = "\u202etxt.exe"
C1 = "\x9b31mred"
# Every byte or character a terminal acts on; none may reach the terminal from stored text.
FORBIDDEN = ("\x1b", "\x07", "\r", "\x08", "\x9b", "\u202e", "\x9d")


def emit_hostile_run(url: str) -> None:
    provider = instrument("hostile", url)
    tracer = provider.get_tracer("tests.terminal_text")
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "hostile", "lousho.run.id": RUN_ID,
             "lousho.harness.revision": "rev-1", "gen_ai.input.messages": "hi"}
    with tracer.start_as_current_span(CLOSE, attributes=attrs) as root:
        with tracer.start_as_current_span(LINK, attributes={"gen_ai.operation.name": "chat"}):
            pass
        with tracer.start_as_current_span(f"execute_tool {BIDI}", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": BIDI}) as tool:
            tool.set_status(Status(StatusCode.ERROR, f"{OVERWRITE} {C1}"))
        with tracer.start_as_current_span(f"title {TITLE}"):
            pass
        record_score(root, f"tests{CLEAR}", 0.0, label="fail", explanation=OSC8, failed_check=f"[bold]{OSC8}")
        root.set_attribute("error.type", CLEAR)
        root.set_status(Status(StatusCode.ERROR, f"{OSC8}\nsecond line"))
    assert provider.force_flush()
    provider.shutdown()


def lousho(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, timeout=120)


def assert_terminal_safe(out: subprocess.CompletedProcess[bytes]) -> str:
    text = out.stdout.decode("utf-8")
    assert out.returncode == 0, out.stderr.decode()
    assert b"Traceback" not in out.stderr, out.stderr.decode()
    for char in FORBIDDEN:
        assert char not in text, (char, text)
    return text


@pytest.fixture(scope="module")
def hostile(shared_daemon):
    emit_hostile_run(shared_daemon.url)
    return shared_daemon


@pytest.mark.system
@pytest.mark.slow
def test_runs_show_prints_hostile_span_text_as_visible_text(hostile):
    text = assert_terminal_safe(lousho("runs", "--url", hostile.url, "show", RUN_ID))
    assert f"{CLOSE}  [ERROR]" in text  # the root span's name, not a closing tag
    assert LINK in text  # shown, not turned into a hidden hyperlink
    assert "execute_tool \\u202etxt.exe  [ERROR]" in text
    assert "ok\\rFAILED\\x08\\x08 \\x9b31mred" in text
    assert "title \\x1b]0;owned\\x07" in text
    # An error's first line only (the whole text is in --json and on the page), its escapes shown as text.
    assert "\\x1b]8;;https://evil.example\\x07hidden\\x1b]8;;\\x07" in text and "second line" not in text
    assert "(failed check: [bold]\\x1b]8;;" in text


@pytest.mark.system
@pytest.mark.slow
def test_runs_and_sql_tables_print_hostile_text_as_visible_text(hostile):
    text = assert_terminal_safe(lousho("runs", "--url", hostile.url, "--agent", "hostile"))
    assert RUN_ID in text and "\\x1b[2J" in text
    text = assert_terminal_safe(lousho(
        "sql", "--url", hostile.url, f"SELECT name, tool_name FROM spans WHERE run_id = '{RUN_ID}' OR "
        f"trace_id IN (SELECT trace_id FROM spans WHERE run_id = '{RUN_ID}') ORDER BY start_ns"))
    assert CLOSE in text and LINK in text and "\\u202etxt.exe" in text
    text = assert_terminal_safe(lousho("sql", "--url", hostile.url, 'SELECT 1 AS "[/]"'))
    assert CLOSE in text


@pytest.mark.system
@pytest.mark.slow
def test_json_and_csv_keep_the_stored_text_exact(hostile):
    out = lousho("sql", "--url", hostile.url, "--json",
                 f"SELECT status_message FROM spans WHERE run_id = '{RUN_ID}'")
    assert json.loads(out.stdout) == [{"status_message": f"{OSC8}\nsecond line"}]
    out = lousho("sql", "--url", hostile.url, "--csv", f"SELECT error_type FROM spans WHERE run_id = '{RUN_ID}'")
    assert out.stdout.decode().splitlines() == ["error_type", CLEAR]
    out = lousho("runs", "--url", hostile.url, "show", RUN_ID, "--json")
    assert json.loads(out.stdout)["run"]["error_type"] == CLEAR


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain [b]text[/b] \\ kept", "plain [b]text[/b] \\ kept"),
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("a\nb\rc\td\x08e\x00f\x7f", "a\\nb\\rc\\td\\x08e\\x00f\\x7f"),
    ("\x85\x9b\x9d", "\\x85\\x9b\\x9d"),
    ("\u202eabc\u2066\u200f\u2028", "\\u202eabc\\u2066\\u200f\\u2028"),
    ("émoji ✓ 日本", "émoji ✓ 日本"),
])
def test_visible_escapes_exactly_the_characters_a_terminal_acts_on(raw, shown):
    assert visible(raw) == shown
    assert safe_text(raw).plain == shown


def test_visible_keeps_newlines_only_when_asked():
    assert visible("a\nb\r\n\x1b", newlines=True) == "a\nb\\r\n\\x1b"
    assert visible(12.5) == "12.5"


# --- the other printers of stored text: pending runs, improve status, error lines ---

HOSTILE = f"{CLOSE} {LINK} {TITLE}{CLEAR}{BIDI}{OVERWRITE}{C1}"


def test_pending_shows_hostile_run_ids_agents_and_errors_as_text(tmp_path):
    from click.testing import CliRunner

    from lousho.recover import durable
    from lousho.recover import store as run_store
    from lousho.recover.cli import pending

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = run_store.open(url)
    try:
        durable.start(store, f"run {TITLE}", f"agent {CLOSE}", "send", {}).fail(RuntimeError(HOSTILE))
    finally:
        store.close()
    result = CliRunner().invoke(pending, ["--store", url], catch_exceptions=False)
    assert result.exit_code == 0
    for char in FORBIDDEN:
        assert char not in result.output, (char, result.output)
    assert "run \\x1b]0;owned\\x07" in result.output and f"agent {CLOSE}" in result.output
    assert "RuntimeError: [/]" in result.output and LINK in result.output  # the cell folds between them


def test_improve_status_shows_a_tampered_proposal_as_text(tmp_path):
    from click.testing import CliRunner

    from lousho.improve.cli import improve

    agent = tmp_path / "agent"
    (agent / ".lousho" / "proposals").mkdir(parents=True)
    (agent / "agent.toml").write_text('name = "a"\nmodel = "m"\n')
    (agent / "instructions.md").write_text("Be brief.\n")
    proposal = {"id": "p1", "status": HOSTILE, "revision": f"rev{CLEAR}", "created_at": "2026-01-01T00:00:00Z"}
    (agent / ".lousho" / "proposals" / "p1.json").write_text(json.dumps(proposal))
    result = CliRunner().invoke(improve, ["status", str(agent)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for char in FORBIDDEN:
        assert char not in result.output, (char, result.output)
    assert "proposal     p1  [/] [link=https://evil.example]click[/link] \\x1b]0;owned" in result.output
    assert "rev\\x1b[2J" in result.output


def test_an_error_line_shows_control_characters_as_escapes(capsys):
    import click

    from lousho.cli import run
    from lousho.observe.errors import RunNotFound

    @click.command()
    def failing() -> None:
        raise RunNotFound(f"no run {TITLE}{BIDI}\nin the store")

    with pytest.raises(SystemExit) as exited:
        run(failing, [])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    for char in FORBIDDEN:
        assert char not in err, (char, err)
    assert err.startswith("error LOUSHO_RUN_NOT_FOUND: no run \\x1b]0;owned\\x07\\u202etxt.exe\nin the store")
