"""Bad input ends a step with keep-base, a stable code and a reason; the harness stays untouched."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from improve_support import ADD_FIX, editor_script, make_agent
from test_step import tree_hash

from lousho.improve import StepOptions, improve_agent
from lousho.models.config import ModelConfig
from lousho.models.faults import Fault
from lousho.models.scripted import ScriptedModelServer


class _Garbage(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b"<html>this is not a chat completion</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def garbage_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def editor() -> Iterator[ModelConfig]:
    with ScriptedModelServer(editor_script({"invariant": [ADD_FIX]})) as server:
        yield ModelConfig(server.url, "editor")


def test_an_agent_directory_without_instructions(tmp_path: Path, agent_model: ModelConfig,
                                                 editor: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    (agent / "instructions.md").unlink()
    before = tree_hash(agent)
    result = improve_agent(agent, check, StepOptions(model=agent_model, editor_model=editor))
    assert result.outcome == "keep-base" and result.could_not_run
    assert result.error is not None and result.error["code"] == "LOUSHO_AGENT_DIR_INVALID"
    assert "instructions.md" in result.reason and result.error["hint"]
    assert tree_hash(agent) == before


@pytest.mark.parametrize("where", ["check", "cases"])
def test_a_check_module_that_raises(tmp_path: Path, agent_model: ModelConfig, editor: ModelConfig,
                                    where: str) -> None:
    agent, check = make_agent(tmp_path)
    source = check.read_text()
    if where == "check":
        source = source.replace("def check(input_text, output):", "def check(input_text, output):\n    1 / 0")
    else:
        source = source.replace("def cases():", "def cases():\n    raise RuntimeError('no database')")
    check.write_text(source)
    before = tree_hash(agent)
    result = improve_agent(agent, check, StepOptions(model=agent_model, editor_model=editor))
    assert result.outcome == "keep-base"
    assert result.error is not None and result.error["code"] == "LOUSHO_IMPROVE_CHECK_RAISED"
    assert ("ZeroDivisionError" if where == "check" else "no database") in result.reason
    assert tree_hash(agent) == before


def test_a_check_module_that_is_missing_or_has_no_check(tmp_path: Path, agent_model: ModelConfig,
                                                        editor: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    missing = improve_agent(agent, tmp_path / "nope.py", StepOptions(model=agent_model, editor_model=editor))
    assert missing.error is not None and missing.error["code"] == "LOUSHO_IMPROVE_CHECK_INVALID"
    check.write_text("def cases():\n    return ['add 1 2']\n")
    no_check = improve_agent(agent, check, StepOptions(model=agent_model, editor_model=editor))
    assert no_check.error is not None and "defines no check" in no_check.reason


def test_an_agent_model_that_answers_garbage(tmp_path: Path, garbage_url: str, editor: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    before = tree_hash(agent)
    result = improve_agent(agent, check, StepOptions(model=ModelConfig(garbage_url, "agent"), editor_model=editor))
    assert result.outcome == "keep-base"
    assert result.error is not None and result.error["code"] == "LOUSHO_IMPROVE_PROBE_FAILED"
    assert "could be scored" in result.reason
    assert tree_hash(agent) == before


def test_an_editor_model_that_answers_garbage(tmp_path: Path, agent_model: ModelConfig, garbage_url: str) -> None:
    agent, check = make_agent(tmp_path)
    before = tree_hash(agent)
    options = StepOptions(model=agent_model, editor_model=ModelConfig(garbage_url, "editor"))
    result = improve_agent(agent, check, options)
    assert result.outcome == "keep-base"
    assert result.error is not None and result.error["code"] == "LOUSHO_IMPROVE_EDITORS_FAILED"
    assert [d.outcome for d in result.decisions if d.kind == "editor"] == ["error", "error"]
    assert tree_hash(agent) == before


def test_an_editor_that_writes_nonsense_keeps_the_base(tmp_path: Path, agent_model: ModelConfig) -> None:
    def nonsense(request):  # type: ignore[no-untyped-def]
        if any(m.get("role") == "tool" for m in request.messages):
            return "done"
        return {"tool_calls": [{"name": "run_shell", "arguments": {"cmd": "rm -rf /"}},
                               {"name": "write_file", "arguments": {"path": "tools.py", "content": "x"}},
                               {"name": "edit_file", "arguments": {"path": "instructions.md"}}]}

    agent, check = make_agent(tmp_path)
    before = tree_hash(agent)
    with ScriptedModelServer(nonsense) as server:
        options = StepOptions(model=agent_model, editor_model=ModelConfig(server.url, "e"))
        result = improve_agent(agent, check, options)
        tool_results = [m["content"] for r in server.requests for m in r["messages"] if m.get("role") == "tool"]
    assert result.outcome == "keep-base" and result.error is None
    assert tool_results and all(t.startswith("error") for t in tool_results)
    assert tree_hash(agent) == before


def test_models_that_time_out(tmp_path: Path, editor: ModelConfig) -> None:
    agent, check = make_agent(tmp_path)
    with ScriptedModelServer(lambda request: Fault.hang(3)) as slow:
        options = StepOptions(model=ModelConfig(slow.url, "agent", timeout=0.3), editor_model=editor)
        result = improve_agent(agent, check, options)
    assert result.error is not None and result.error["code"] == "LOUSHO_IMPROVE_PROBE_FAILED"
    assert "timeout" in result.reason.lower() or "timed out" in result.reason.lower()


@pytest.mark.parametrize("options", [StepOptions(proposers=5), StepOptions(mode="fast"),  # type: ignore[arg-type]
                                     StepOptions(failure_names="all")])  # type: ignore[arg-type]
def test_an_option_out_of_range_is_an_error_result_not_an_exception(tmp_path: Path, options: StepOptions) -> None:
    agent, check = make_agent(tmp_path)
    result = improve_agent(agent, check, options)
    assert result.outcome == "keep-base" and result.error is not None
    assert result.error["code"] == "LOUSHO_IMPROVE_OPTION_INVALID" and result.error["hint"]
