"""CLI of the models part: the ``models`` group (``lousho models serve-scripted``) and model flags.

This is the only module of the part that reads the environment (the API key, via ModelConfig).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from lousho.kernel.errors import UsageError
from lousho.models.client import ChatClient
from lousho.models.config import ModelConfig

F = TypeVar("F", bound=Callable[..., Any])
READY = "lousho models ready url={url}"


@click.group()
def models() -> None:
    """Model endpoints: the scripted model server for tests and benchmarks."""


@models.command("serve-scripted")
@click.option("--script", "script", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="A .py file defining respond(request), or a .json list of rules.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port; 0 picks a free one (the ready line names it).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds request.rng, per request.")
@click.option("--log", "log_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Append every request and its reply to this JSONL file.")
def serve_scripted(script: Path, host: str, port: int, seed: int, log_path: Path | None) -> None:
    """Serve OpenAI-compatible chat completions and responses (plain or streamed), answered by SCRIPT, until
    SIGTERM or SIGINT (then exit 0)."""
    from lousho.models.scripted import ScriptedModelServer

    server = ScriptedModelServer(script, seed=seed, host=host, port=port, log_path=log_path)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        click.echo(READY.format(url=server.url))
        sys.stdout.flush()
        # A timeout, so the main thread wakes to run the signal handler on every platform.
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def model_options(fn: F) -> F:
    """``--model-url``, ``--model``, ``--model-key-env``, ``--model-timeout`` for any command that calls a model.

    Precedence: the flag, then ``LOUSHO_MODEL_URL`` / ``LOUSHO_MODEL``, then the default. The command
    passes them to :func:`model_config`; the key itself is read by :func:`model_client`.
    """
    fn = click.option("--model-timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
                      help="Seconds to wait for the model to connect and answer.")(fn)
    fn = click.option("--model-key-env", default="OPENAI_API_KEY", show_default=True,
                      help="Environment variable holding the API key (unset: no key sent).")(fn)
    fn = click.option("--model", "model_name", envvar="LOUSHO_MODEL", default=None,
                      help="Model name [env LOUSHO_MODEL].")(fn)
    fn = click.option("--model-url", envvar="LOUSHO_MODEL_URL", default=None,
                      help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 [env LOUSHO_MODEL_URL].")(fn)
    return fn


def model_config(model_url: str | None, model_name: str | None, model_key_env: str,
                 model_timeout: float) -> ModelConfig:
    if not model_url or not model_name:
        raise UsageError("a model is needed: pass --model-url and --model (or LOUSHO_MODEL_URL, LOUSHO_MODEL)",
                         code="LOUSHO_MODELS_CONFIG_INVALID",
                         hint="e.g. --model-url http://127.0.0.1:8000/v1 --model my-model")
    return ModelConfig(model_url, model_name, api_key_env=model_key_env, timeout=model_timeout)


def model_client(config: ModelConfig) -> ChatClient:
    """The client for ``config``, with the key from the environment variable it names."""
    return config.client(os.environ)


def main(argv: list[str] | None = None) -> None:
    """``python -m lousho.models``: the group alone, with lousho's error printing (one line and a hint)."""
    from lousho.kernel.cli_support import run

    run(models, argv, prog_name="lousho models")
