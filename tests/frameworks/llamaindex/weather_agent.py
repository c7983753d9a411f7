"""A LlamaIndex ``FunctionAgent`` as its docs build one, run once per question, traced to lousho's daemon.

Run as a child process by tests/frameworks/test_llamaindex.py, in the agent's own venv (.venv-llamaindex: LlamaIndex
needs ``openai<3``, lousho's dev env has ``openai`` 3), so this file imports neither lousho nor the tests'
helpers: the plan (the agent's name, system prompt, model, questions) comes as JSON on the command line, and the
tool is a copy of ``frameworks_support.get_weather``.

Everything is at LlamaIndex's defaults but the model's base URL and name: ``OpenAI`` speaks chat completions,
``FunctionAgent`` streams (``streaming=True``), hands a tool's exception back to the model as the tool's result
(``BaseWorkflowAgent._call_tool``), and the ``openai`` client retries a 500 (``max_retries=3``).

    python weather_agent.py DAEMON_URL MODEL_URL PLAN_JSON
"""

from __future__ import annotations

import asyncio
import json
import sys

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

SERVICE = "llamaindex-weather"


class NoStationError(LookupError):
    pass


def get_weather(city: str) -> str:
    """The agent's tool, in every Python framework test."""
    # A copy of frameworks_support.get_weather (that module imports lousho, which this venv does not have).
    if city.startswith("Atlantis"):
        raise NoStationError(f"no station in {city}")
    return f"sunny in {city}"


async def main(model_url: str, plan: dict) -> None:
    llm = OpenAI(model=plan["model"], api_base=model_url, api_key="sk-test")
    agent = FunctionAgent(name=plan["agent"], system_prompt=plan["system"],
                          tools=[FunctionTool.from_defaults(fn=get_weather)], llm=llm)
    for question in plan["questions"]:
        try:
            result = await agent.run(user_msg=question)
            print(f"ok: {question} -> {result}", flush=True)
        except Exception as e:  # a failed run is the agent's to report, the next question still runs
            print(f"failed: {question} -> {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    daemon_url, model_url, plan_json = sys.argv[1:4]
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{daemon_url}/v1/traces")))
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    try:
        asyncio.run(main(model_url, json.loads(plan_json)))
    finally:
        provider.shutdown()  # flushes the batch before the process exits
