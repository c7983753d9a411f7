"""The LangGraph agent of tests/frameworks/test_langgraph.py, built as LangChain's docs build one, at its defaults.

Run as a child process (the LangChain instrumentation patches LangChain's callback manager for the whole process)::

    python tests/frameworks/langgraph/langgraph_agent.py --model-url URL/v1 --otlp URL [--builder B] [--name NAME]

``--builder create_agent`` (the default) is ``langchain.agents.create_agent``, which today's LangGraph v1 docs
recommend; ``create_react_agent`` is ``langgraph.prebuilt.create_react_agent``, deprecated by LangGraph v1 but
still what most LangGraph code in production calls. Both make a graph of a model node and a ToolNode, named
after ``--name``: create_agent's nodes are "model" and "tools"; create_react_agent's are "agent" and "tools", with
a routing edge "should_continue" whose output after the answer is ``__end__``.

Only the base URL, the API key and the model name are set on ``ChatOpenAI``: it uses chat completions (the
Responses API only for models that need it or Responses-only parameters), does not stream on ``invoke``, and
retries twice (the openai client's default). The graph's ToolNode keeps its default ``handle_tool_errors``,
which re-raises every exception but a tool-call validation error: ``get_weather``'s ``NoStationError`` ends the
run. Each of the 20 runs is one ``agent.invoke``; a failing run's exception is caught here and reported, and the
next run goes on. Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent)]  # frameworks_support and the tests' helpers

from frameworks_support import RUNS, SYSTEM, question  # noqa: E402
from frameworks_support import get_weather as weather_of  # noqa: E402
from openinference.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

AGENT_NAME = "weather-agent"
SERVICE_NAME = "langgraph-weather"


def get_weather(city: str) -> str:
    """The weather in a city."""
    return weather_of(city)


def build(builder: str, model_url: str, name: str) -> Any:
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(model="gpt-4o-mini", base_url=model_url, api_key="sk-test")
    if builder == "create_agent":
        from langchain.agents import create_agent
        return create_agent(model, tools=[get_weather], system_prompt=SYSTEM, name=name)
    from langgraph.prebuilt import create_react_agent
    return create_react_agent(model, tools=[get_weather], prompt=SYSTEM, name=name)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--otlp", required=True)
    parser.add_argument("--builder", choices=("create_agent", "create_react_agent"), default="create_agent")
    parser.add_argument("--name", default=AGENT_NAME)
    args = parser.parse_args()

    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{args.otlp}/v1/traces")))
    LangChainInstrumentor().instrument(tracer_provider=provider)
    agent = build(args.builder, args.model_url, args.name)
    try:
        for i in range(RUNS):
            try:
                state = agent.invoke({"messages": [{"role": "user", "content": question(i)}]})
            except Exception as e:  # noqa: BLE001 - a failing run is part of the plan; the next one goes on
                print(json.dumps({"run": i, "error": type(e).__name__}), flush=True)
            else:
                print(json.dumps({"run": i, "answer": state["messages"][-1].text}), flush=True)
    finally:
        provider.shutdown()  # flushes the batch processor
    return 0


if __name__ == "__main__":
    sys.exit(main())
