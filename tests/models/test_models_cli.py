"""`lousho models serve-scripted` as a real child process, and the model flags' precedence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from models_support import SUPPORT_DESK, user

from lousho.models import ChatClient, ProviderError
from lousho.models.cli import model_config, model_options
from lousho.models.errors import ServerStartFailed
from lousho.models.process import start_scripted


@pytest.mark.system
def test_serve_scripted_starts_answers_logs_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    served = start_scripted(SUPPORT_DESK, seed=3, log=log)
    try:
        assert served.url.startswith("http://127.0.0.1:") and served.url.endswith("/v1")
        client = ChatClient(served.url, "m", timeout=10)
        assert client.complete(user("hello")).content == "echo: hello"
        with pytest.raises(ProviderError) as caught:
            client.complete(user("fault 429"))
        assert (caught.value.category, caught.value.retry_after) == ("rate-limit", 2)
    finally:
        code = served.stop()
    assert code == 0, "\n".join(served.output)
    assert any(line.startswith("lousho models ready url=http://127.0.0.1:") for line in served.output)
    assert [json.loads(line)["status"] for line in log.read_text().splitlines()] == [200, 429]


@pytest.mark.system
def test_serve_scripted_with_a_missing_script_exits_2_naming_the_code_and_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.py"
    done = subprocess.run([sys.executable, "-m", "lousho.models", "serve-scripted", "--script", str(missing)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "LOUSHO_MODELS_SCRIPT_NOT_FOUND" in done.stderr and str(missing) in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.system
def test_the_process_helper_reports_a_server_that_did_not_start(tmp_path: Path) -> None:
    script = tmp_path / "quiet.py"
    script.write_text("x = 1\n")
    with pytest.raises(ServerStartFailed, match="LOUSHO_MODELS_SCRIPT_NO_RESPOND"):
        start_scripted(script)


@click.command()
@model_options
def show(**options: object) -> None:
    config = model_config(**options)  # type: ignore[arg-type]
    click.echo(f"{config.url} {config.model} {config.api_key_env} {config.timeout}")


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--model-url", "http://a:1/v1", "--model", "m1"], {}, "http://a:1/v1 m1 OPENAI_API_KEY 60.0"),
        ([], {"LOUSHO_MODEL_URL": "http://b:2/v1", "LOUSHO_MODEL": "m2"}, "http://b:2/v1 m2 OPENAI_API_KEY 60.0"),
        (["--model-url", "http://a:1/v1", "--model", "m1", "--model-key-env", "K", "--model-timeout", "5"],
         {"LOUSHO_MODEL_URL": "http://b:2/v1", "LOUSHO_MODEL": "m2"}, "http://a:1/v1 m1 K 5.0"),
    ],
    ids=["flags", "environment", "flags over environment"],
)
def test_model_flags_take_the_flag_then_the_environment_then_the_default(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    env = {"LOUSHO_MODEL_URL": None, "LOUSHO_MODEL": None, **env}  # type: ignore[dict-item]
    result = CliRunner().invoke(show, args, env=env, catch_exceptions=False)
    assert result.output.strip() == expected


def test_a_command_without_a_model_is_a_usage_error() -> None:
    result = CliRunner().invoke(show, [], env={"LOUSHO_MODEL_URL": None, "LOUSHO_MODEL": None})
    assert result.exception is not None
    assert getattr(result.exception, "code", None) == "LOUSHO_MODELS_CONFIG_INVALID"
