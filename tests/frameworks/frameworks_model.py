"""The scripted model every framework test drives: one ``get_weather`` call, then the answer.

"weather in CITY" asks for the tool. With the tool's result it answers "The weather in CITY: RESULT." When the
result is an error the framework handed back to the model, it answers "Sorry, I could not get the weather for
CITY." A city starting with "Faultville" gets its tool call, then a provider error (HTTP 500, on every retry)
instead of the answer: the run fails after one model call that used tokens. The 500 says ``retry-after-ms: 20``,
as providers may: the clients' default retries then wait 20 ms, not their back-off of seconds.
"""

from dataclasses import replace

from lousho.models.scripted import Fault

ERROR_MARKS = ("error", "exception", "traceback", "no station")


def city_of(text: str) -> str:
    return text.split("weather in ", 1)[1].rstrip("?").strip()


def respond(request):
    text = request.last_user or ""
    if request.last_tool is not None and "weather in " in text:
        city = city_of(text)
        if city.startswith("Faultville"):
            return replace(Fault.status(500), headers={"retry-after-ms": "20"})
        if any(mark in request.last_tool.content.lower() for mark in ERROR_MARKS):
            return f"Sorry, I could not get the weather for {city}."
        return f"The weather in {city}: {request.last_tool.content}."
    if "weather in " in text:
        return {"content": None, "tool_calls": [{"name": "get_weather", "arguments": {"city": city_of(text)}}]}
    return f"echo: {text}"
