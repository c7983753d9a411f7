"""A bad agent directory, an unknown tool, a skill without a description, a corrupt checkpoint:
each is one error line with a code and a hint naming the file or run, never a traceback."""

from __future__ import annotations

import sqlite3

import pytest
from agent_support import copy_example, lousho

from lousho.agent import load
from lousho.agent.errors import AgentDirInvalid, SkillInvalid
from lousho.agent.loop import Agent
from lousho.models.client import ChatClient
from lousho.recover import store as run_store


def _run(tmp_path, agent_dir, model, *extra):
    return lousho("agent", "run", str(agent_dir), "add 1 2", "--model-url", model.url, "--model", "scripted",
                  "--store", f"sqlite:///{tmp_path / 'runs.db'}", *extra)


def _assert_clean_error(result, code: str, *names: str) -> None:
    assert result.returncode in (1, 2)
    assert "Traceback" not in result.stderr
    assert f"error {code}" in result.stderr and "hint:" in result.stderr
    for name in names:
        assert name in result.stderr


@pytest.mark.system
@pytest.mark.parametrize(("breakage", "code", "named"), [
    (lambda d: (d / "agent.toml").write_text("name = [unclosed"), "LOUSHO_AGENT_DIR_INVALID", "agent.toml"),
    (lambda d: (d / "agent.toml").write_text('max_step = 3\n'), "LOUSHO_AGENT_DIR_INVALID", "max_steps"),
    (lambda d: (d / "instructions.md").unlink(), "LOUSHO_AGENT_DIR_INVALID", "instructions.md"),
    (lambda d: (d / "instructions.md").write_text("x" * 8001), "LOUSHO_AGENT_DIR_INVALID", "8000"),
    (lambda d: (d / "tools.py").write_text("import nosuchmodule\n"), "LOUSHO_AGENT_DIR_INVALID", "tools.py"),
    (lambda d: (d / "agent.toml").write_text('approval = ["rm_rf"]\n'), "LOUSHO_AGENT_DIR_INVALID", "rm_rf"),
    (lambda d: (d / "skills" / "arithmetic" / "SKILL.md").write_text("no front matter\n"), "LOUSHO_SKILL_INVALID",
     "SKILL.md"),
])
def test_a_malformed_agent_directory_gives_a_coded_error_naming_the_file(tmp_path, model, breakage, code, named):
    agent_dir = copy_example(tmp_path / "agent")
    breakage(agent_dir)
    _assert_clean_error(_run(tmp_path, agent_dir, model), code, named)


def test_loading_errors_are_typed_with_hints(tmp_path):
    agent_dir = copy_example(tmp_path / "agent")
    (agent_dir / "skills" / "arithmetic" / "SKILL.md").write_text("---\nname: arithmetic\n---\nbody\n")
    with pytest.raises(SkillInvalid) as err:
        load(agent_dir)
    assert "no description" in err.value.message and str(agent_dir) in err.value.message and err.value.hint
    with pytest.raises(AgentDirInvalid):
        load(tmp_path / "missing")


@pytest.mark.system
def test_a_model_calling_an_unknown_tool_is_told_so_and_the_run_goes_on(tmp_path):
    from lousho.models.scripted import ScriptedModelServer

    def respond(request):
        if request.last_tool is None:
            return {"tool_calls": [{"name": "rm_rf", "arguments": {"path": "/"}}]}
        return f"tool said: {request.last_tool.content}"

    with ScriptedModelServer(respond) as server:
        agent = Agent(load(copy_example(tmp_path / "agent")), ChatClient(server.url, "m"),
                      run_store.open(f"sqlite:///{tmp_path / 'runs.db'}"))
        result = agent.send("anything")
    assert result.finish_reason == "stop"
    assert result.output.startswith("tool said: error: unknown tool 'rm_rf'")
    assert "write_note" in result.output  # the error lists the tools that exist


@pytest.mark.system
def test_a_corrupt_checkpoint_row_gives_a_coded_error_naming_the_run(tmp_path, model):
    agent_dir = copy_example(tmp_path / "agent")
    store = tmp_path / "runs.db"
    done = _run(tmp_path, agent_dir, model, "--run-id", "r-corrupt")
    assert done.returncode == 0, done.stderr
    con = sqlite3.connect(store)
    con.execute("UPDATE runs SET status = 'interrupted' WHERE id = 'r-corrupt'")
    con.execute("UPDATE checkpoints SET output = '{not json' WHERE run_id = 'r-corrupt'")
    con.commit()
    con.close()
    resumed = lousho("runs", "resume", "r-corrupt", "--model-url", model.url, "--model", "scripted",
                     "--store", f"sqlite:///{store}")
    _assert_clean_error(resumed, "LOUSHO_CHECKPOINT_CORRUPT", "r-corrupt")


@pytest.mark.system
def test_resuming_an_unknown_run_names_it(tmp_path, model):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    _run(tmp_path, copy_example(tmp_path / "agent"), model)
    result = lousho("runs", "resume", "nope", "--model-url", model.url, "--model", "scripted", "--store", store)
    _assert_clean_error(result, "LOUSHO_RUN_NOT_FOUND", "nope")


@pytest.mark.parametrize(("content", "named"), [(None, "check module missing"),
                                                ("ANSWER = 42\n", "defines no check"),
                                                ("import nosuchmodule\n", "failed to load")])
def test_a_bad_check_file_is_a_check_error_not_an_agent_directory_error(tmp_path, content, named):
    from lousho.agent.errors import CheckInvalid
    from lousho.agent.runner import load_check

    path = tmp_path / "check.py"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CheckInvalid) as err:
        load_check(path)
    assert err.value.code == "LOUSHO_AGENT_CHECK_INVALID" and named in err.value.message
    assert "--check" in err.value.hint  # it pointed at agent.toml and skills
