"""Any agent's harness: a directory of instructions.md and skills/*/SKILL.md, without lousho's agent.toml.

The loop improves it through the check module's probe(), and its revision is one public value: the same from
``lousho improve revision``, ``lousho improve status``, ``lousho.harness_revision`` and the loader's hash.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from improve_support import HARNESS_ONLY_CHECK, SIGN_FIX, editor_script

import lousho
from lousho.agent.directory import harness_revision as loader_revision
from lousho.cli import run
from lousho.improve import StepOptions, improve_agent
from lousho.improve.cli import improve
from lousho.improve.cycle import LoopSetup, run_cycle
from lousho.models.config import ModelConfig
from lousho.models.scripted import ScriptedModelServer

FIX, CHECK = SIGN_FIX, HARNESS_ONLY_CHECK


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    root = tmp_path / "desk"
    (root / "skills" / "refunds").mkdir(parents=True)
    (root / "instructions.md").write_text("You answer support questions.\n")
    (root / "skills" / "refunds" / "SKILL.md").write_text("---\ndescription: how refunds work\n---\nRefund.\n")
    (root / "agent.py").write_text("# the user's own agent code: never the loop's to edit\n")
    (tmp_path / "check.py").write_text(CHECK)
    return root


def test_the_revision_is_the_same_from_every_door(harness: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(improve, ["revision", str(harness)])
    printed = capsys.readouterr().out.strip()
    run(improve, ["status", str(harness), "--json"])
    status = json.loads(capsys.readouterr().out)
    assert printed == status["revision"] == lousho.harness_revision(harness) == loader_revision(harness)
    assert len(printed) == 16 and int(printed, 16) >= 0


def test_revision_of_a_directory_without_instructions_is_a_coded_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run(improve, ["revision", str(tmp_path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error LOUSHO_IMPROVE_HARNESS_INVALID:" in err and "instructions.md: missing" in err
    assert "hint: " in err and "Traceback" not in err


def test_a_harness_only_directory_is_improved_through_probe_and_its_code_is_untouched(harness: Path) -> None:
    agent_code = (harness / "agent.py").read_bytes()
    with ScriptedModelServer(editor_script({"invariant": [FIX]})) as editor:
        setup = LoopSetup(harness, harness.parent / "check.py",
                          StepOptions(editor_model=ModelConfig(editor.url, "editor")), environ={})
        result = run_cycle(setup)
    assert result.outcome == "applied", result.reason
    assert FIX in (harness / "instructions.md").read_text()
    assert result.revision == lousho.harness_revision(harness)
    assert (harness / "agent.py").read_bytes() == agent_code


def test_a_harness_only_directory_without_probe_says_what_to_define(harness: Path) -> None:
    (harness.parent / "check.py").write_text(CHECK.replace("def probe(", "def not_probe("))
    result = improve_agent(harness, harness.parent / "check.py", environ={})
    assert result.error is not None and result.error["code"] == "LOUSHO_IMPROVE_NO_PROBE"
    assert "probe(harness_dir, case, repeat)" in result.error["hint"]


def test_a_probe_that_raises_is_a_run_that_cannot_be_scored_and_the_step_says_so(harness: Path) -> None:
    (harness.parent / "check.py").write_text(CHECK.replace(
        "    instructions = ", "    raise ConnectionError('model unreachable')\n    instructions = "))
    result = improve_agent(harness, harness.parent / "check.py", environ={})
    assert result.error is not None and result.error["code"] == "LOUSHO_IMPROVE_PROBE_FAILED"
    assert "ConnectionError: model unreachable" in result.error["message"]

