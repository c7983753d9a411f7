"""The weather agent built with the OpenAI Agents SDK the way its docs show, traced by OpenInference.

Run as a child process of tests/frameworks/test_openai_agents.py (the instrumentation patches the whole
process): ``python openai_agents_weather.py --model-url URL --otlp DAEMON_URL``. It makes the 20 runs of the
plan (frameworks_support), one ``Runner.run_sync`` each, and prints one JSON line per run: the final output,
or the type of the exception the run raised.

Only the base URL and the model name are set; everything else is the SDK's default: the Responses API, not
streamed (``Runner.run_sync``), the tool's exception handed back to the model by the default
``failure_error_function``, the openai client's own retries (``max_retries=2``) and no runner retries.

Tracing: the SDK traces every run by default and exports to OpenAI's trace endpoint.
``OpenAIAgentsInstrumentor().instrument()`` replaces the SDK's processors with its own by default
(``exclusive_processor=True``), so the SDK's exporter is gone and nothing tries to reach OpenAI; we do not
call ``set_tracing_disabled(True)``, which would stop the SDK from making the traces the instrumentation
turns into spans.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# frameworks_support is in tests/frameworks/, and it imports daemon_support from tests/.
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent)]

import frameworks_support  # noqa: E402
from agents import Agent, Runner, function_tool, set_default_openai_client  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

AGENT_NAME = "weather-agent"


class Retries(logging.Handler):
    """Counts the openai client's retries, which it logs at INFO ("Retrying request in ..."): the test checks
    that they are its default, without changing the client."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Retrying request"):
            self.count += 1


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city.

    Args:
        city: The city's name.
    """
    return frameworks_support.get_weather(city)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--otlp", required=True, help="the daemon's base URL")
    parser.add_argument("--service", default="svc-openai-agents")
    args = parser.parse_args()

    provider = TracerProvider(resource=Resource.create({"service.name": args.service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{args.otlp}/v1/traces")))
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

    retries = Retries()
    client_log = logging.getLogger("openai._base_client")
    client_log.addHandler(retries)
    client_log.setLevel(logging.INFO)

    set_default_openai_client(AsyncOpenAI(base_url=args.model_url, api_key="sk-test"))
    agent = Agent(name=AGENT_NAME, instructions=frameworks_support.SYSTEM, model=frameworks_support.MODEL,
                  tools=[get_weather])
    try:
        for i in range(frameworks_support.RUNS):
            retries.count = 0
            outcome: dict[str, object] = {"run": i}
            try:
                outcome["output"] = Runner.run_sync(agent, frameworks_support.question(i)).final_output
            except Exception as e:  # noqa: BLE001 (a provider 500 ends the run; the next run goes on)
                outcome["raised"] = type(e).__name__
            outcome["retries"] = retries.count
            print(json.dumps(outcome), flush=True)
    finally:
        provider.shutdown()  # flushes the batch before the process exits
    return 0


if __name__ == "__main__":
    sys.exit(main())
