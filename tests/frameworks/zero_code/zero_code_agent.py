"""An agent on the plain ``openai`` SDK with no tracing code at all: traced only by being started under
``opentelemetry-instrument`` (zero-code), with the GenAI instrumentation for OpenAI the launcher finds installed.

Run in a venv holding exactly requirements.txt::

    OTEL_SERVICE_NAME=weather-zero-code opentelemetry-instrument python zero_code_agent.py \
        --model-url URL --plan PLAN.json

The plan is ``{"system": str, "model": str, "questions": [str]}``. Each question is a request the agent serves:
a model call asking for ``get_weather``, the tool (it raises for a city with no station, as the framework tests'
tool does), a second call with its result. A request that raises is reported and the next one served. Prints one
JSON line per question: ``{"question", "answer", "raised"}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from openai import OpenAI

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


class NoStationError(LookupError):
    pass


def get_weather(city: str) -> str:
    if city.startswith("Atlantis"):
        raise NoStationError(f"no station in {city}")
    return f"sunny in {city}"


def serve(client: OpenAI, model: str, system: str, question: str) -> str | None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    message = client.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message
    if not message.tool_calls:
        return message.content
    messages.append({"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in message.tool_calls]})
    for call in message.tool_calls:
        result = get_weather(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return client.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message.content


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--plan", type=Path, required=True)
    args = parser.parse_args()
    plan = json.loads(args.plan.read_text())
    client = OpenAI(base_url=args.model_url, api_key="sk-test")
    for question in plan["questions"]:
        try:
            print(json.dumps({"question": question, "answer": serve(client, plan["model"], plan["system"], question),
                              "raised": None}), flush=True)
        except Exception as e:  # a request that failed; the agent serves the next one
            print(json.dumps({"question": question, "answer": None, "raised": type(e).__name__}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
