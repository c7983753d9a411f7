"""The probe: run one case under one harness, judge it, and return the run as a RunRecord.

The boundary is ``probe(harness_dir, case, repeat) -> RunRecord`` (DESIGN §6). A check module may
define its own; without one, :class:`AgentProbe` runs the reference agent on a throwaway copy of
the agent directory. A probe owns the side effects of the tools it runs: ``create_shadow_hook``
keeps every tool not named read-only from running at all.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from lousho.agent import directory as agent_directory
from lousho.agent.hooks import Hook, Replace, ToolCallInfo
from lousho.agent.loop import Agent, RunOptions
from lousho.agent.verdict import Check, Verdict
from lousho.improve.errors import CheckRaised
from lousho.improve.records import Case, RunRecord
from lousho.kernel.errors import LoushoError
from lousho.models.config import ModelConfig
from lousho.models.errors import ProviderError
from lousho.models.protocol import Message, ModelClient, Tool
from lousho.models.result import ChatResult


class Probe(Protocol):
    """Run one case under the harness at ``harness_dir`` and say how it went.

    ``harness_dir`` is a throwaway copy of the agent directory with the harness under test written
    over it; the probe must read the agent's instructions and skills from there, start a fresh run
    (no state shared with other repeats or cases), and keep tools with side effects from acting
    (``create_shadow_hook``, or the agent's own dry-run switch). Called from one thread per run.
    """

    def __call__(self, harness_dir: Path, case: Case, repeat: int) -> RunRecord | ProbeResult | str | None: ...


@dataclass(frozen=True)
class ProbeResult:
    """What a check module's ``probe()`` may return instead of a RunRecord: lousho judges ``output``
    with ``check()`` and records the run under ``harness_dir``'s revision. ``finish_reason`` other
    than ``stop``/``max-steps`` is a failed run; ``error`` with no ``output`` says why it could not
    be scored (the model was unreachable). ``input_tokens`` and ``output_tokens`` (which sum to ``tokens``,
    input including ``cache_read_tokens``) and ``model`` let the gate price the run in dollars; without them
    its cost rule counts tokens."""

    output: str | None
    tokens: int = 0
    requests: int = 0
    messages: Sequence[dict[str, Any]] = ()
    finish_reason: str = "stop"
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    model: str | None = None

    def spend(self) -> dict[str, Any]:
        # A probe that gives the split may leave the total out: it is their sum.
        tokens = self.tokens or self.input_tokens + self.output_tokens
        return {"tokens": tokens, "requests": self.requests, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "cache_read_tokens": self.cache_read_tokens, "model": self.model}


@dataclass(frozen=True)
class UserProbe:
    """A check module's ``probe()``, judged by its ``check()``: the probe for an agent lousho did not build.

    A RunRecord passes through; a ProbeResult or a bare output string is judged. An exception
    that is not lousho's (the agent's SDK could not reach its model, a bug) makes the run
    ``cannot-score`` with the error, so a step with no scored run stops with LOUSHO_IMPROVE_PROBE_FAILED.
    """

    fn: Callable[[Path, Case, int], Any]
    check: Check

    def __call__(self, harness_dir: Path, case: Case, repeat: int) -> RunRecord:
        from lousho.improve.harness import harness_revision

        revision = harness_revision(harness_dir)
        try:
            result = self.fn(harness_dir, case, repeat)
        except LoushoError:
            raise
        except Exception as e:  # deliberate: user code; one run that cannot be scored, with why
            return RunRecord(case.id, revision, repeat, "cannot-score", finish_reason="error",
                             error=f"probe raised {type(e).__name__}: {e}"[:500])
        if isinstance(result, RunRecord):
            return result
        if result is None or isinstance(result, str):
            result = ProbeResult(result)
        if not isinstance(result, ProbeResult):
            raise CheckRaised(f"probe returned {type(result).__name__} on case {case.id}; expected a ProbeResult, "
                              "a RunRecord or the output text")
        if result.output is None and result.error:
            return RunRecord(case.id, revision, repeat, "cannot-score", finish_reason="error", error=result.error,
                             messages=tuple(result.messages), **result.spend())
        return record_of(case, revision, repeat, self.check, result.output, result.finish_reason,
                         messages=result.messages, error=result.error, **result.spend())


def create_shadow_hook(read_only: Sequence[str] = ()) -> Hook:
    """A hook under which only the ``read_only`` tools run; every other call gets a stand-in result.

    The model still sees a plausible reply, so the run goes on, but nothing the tool would have done
    (send, write, delete) happens during a probe.
    """
    allowed = frozenset(read_only)

    def pre(call: ToolCallInfo) -> Replace | None:
        if call.tool in allowed:
            return None
        return Replace(f"ok (shadow: {call.tool} was not run because this is a probe)", action="shadow",
                       reason=f"{call.tool} is not read-only")

    return Hook("shadow", pre_tool_call=pre)


def judge(check: Check, case: Case, output: str | None) -> Verdict:
    """The check's verdict; a check that raises or returns something else stops the step (CheckRaised)."""
    try:
        verdict = check(case.input, output)
    except Exception as e:  # deliberate: user code; any failure is one clear error naming the case
        raise CheckRaised(f"check raised on case {case.id}: {type(e).__name__}: {e}") from None
    if not isinstance(verdict, Verdict):
        raise CheckRaised(f"check returned {type(verdict).__name__} on case {case.id}, not a Verdict")
    return verdict


@dataclass
class _Counting:
    """A model client that counts its requests and tokens (one per run, so no lock is needed)."""

    inner: ModelClient
    model: str | None = None  # the model every call asks for: the run's price is this model's
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0

    def complete(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
                 temperature: float | None = None, seed: int | None = None,
                 max_tokens: int | None = None) -> ChatResult:
        self.requests += 1
        result = self.inner.complete(messages, tools, temperature=temperature, seed=seed, max_tokens=max_tokens)
        self.input_tokens += result.usage.input_tokens
        self.output_tokens += result.usage.output_tokens
        self.cache_read_tokens += result.usage.cache_read_tokens
        return result

    def spend(self) -> dict[str, Any]:
        return {"tokens": self.input_tokens + self.output_tokens, "requests": self.requests,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens, "model": self.model}


@dataclass
class AgentProbe:
    """The default probe: the reference agent on ``harness_dir`` with ``model``, judged by ``check``.

    Each run gets its own SQLite checkpoint store in ``work_dir`` (a temporary directory by default),
    so probe runs never mix with the agent's real runs, and its root span is marked ``probe`` should
    telemetry be on. ``read_only`` (when given) adds :func:`create_shadow_hook` to the agent's hooks.
    """

    model: ModelConfig
    check: Check
    environ: Mapping[str, str] = field(default_factory=dict)
    read_only: Sequence[str] | None = None
    work_dir: Path | None = None
    client_factory: Callable[[], ModelClient] | None = None

    @cached_property
    def _model_client(self) -> ModelClient:
        """One client for every run of this probe (it pools connections and is safe across threads): building
        one loads the SDK's certificate bundle, about 50 ms, which a probe would otherwise pay on every run."""
        return self.model.client(self.environ)

    def __call__(self, harness_dir: Path, case: Case, repeat: int) -> RunRecord:
        from lousho.recover.store import open as open_store

        directory = agent_directory.load(harness_dir)
        hooks: tuple[Hook, ...] = directory.hooks
        if self.read_only is not None:
            hooks = (*hooks, create_shadow_hook(self.read_only))
        client = _Counting(self.client_factory() if self.client_factory else self._model_client, self.model.model)
        with tempfile.TemporaryDirectory(prefix="lousho-probe-", dir=self.work_dir) as tmp:
            store = open_store(f"sqlite:///{Path(tmp) / 'runs.db'}")
            try:
                agent = Agent(directory, client, store, model_name=self.model.model, hooks=hooks)
                run_id = f"probe-{uuid.uuid4().hex[:16]}"
                try:
                    result = agent.send(case.input, run_id=run_id, options=RunOptions(case_id=case.id, probe=True))
                except ProviderError as e:
                    return RunRecord(case.id, directory.revision, repeat, "cannot-score", finish_reason="error",
                                     error=f"{e.code}: {e.message}", **client.spend())
            finally:
                store.close()
        return record_of(case, directory.revision, repeat, self.check, result.output, result.finish_reason,
                         messages=result.messages, error=(result.error or {}).get("message") if result.error else None,
                         **client.spend())


def record_of(case: Case, revision: str, repeat: int, check: Check, output: str | None, finish_reason: str, *,
              tokens: int, requests: int, messages: Sequence[dict[str, Any]] = (),
              error: str | None = None, input_tokens: int = 0, output_tokens: int = 0, cache_read_tokens: int = 0,
              model: str | None = None) -> RunRecord:
    """Judge a finished run. A run a hook stopped failed; one waiting for a person cannot be scored."""
    spend = {"input_tokens": input_tokens, "output_tokens": output_tokens, "cache_read_tokens": cache_read_tokens,
             "model": model}
    if finish_reason == "awaiting-approval":
        return RunRecord(case.id, revision, repeat, "cannot-score", output=output, tokens=tokens, requests=requests,
                         finish_reason=finish_reason, error="the run waits for a person's approval",
                         messages=tuple(messages), **spend)
    if finish_reason in ("stop", "max-steps"):
        verdict = judge(check, case, output)
    else:
        verdict = Verdict("fail", explanation=error or f"the run ended {finish_reason}")
    return RunRecord(case.id, revision, repeat, verdict.status, output=output, failed_check=verdict.failed_check,
                     explanation=verdict.explanation, tokens=tokens, requests=requests, finish_reason=finish_reason,
                     error=error, messages=tuple(messages), **spend)
