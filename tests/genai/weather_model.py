"""The scripted model the GenAI instrumentation tests drive: one tool call, then an answer.

"weather in CITY" asks for the get_weather tool; the tool's result gives the answer. A message starting
with "fault" gets its tool call too, then a provider error (HTTP 500) instead of the answer: the run fails
after one model call that used tokens.
"""

from lousho.models.scripted import Fault


def respond(request):
    text = request.last_user or ""
    if request.last_tool is not None:
        if text.startswith("fault"):
            return Fault.status(500)
        return f"The weather: {request.last_tool.content}."
    if "weather in " in text:
        city = text.split("weather in ", 1)[1].rstrip("?").strip()
        return {"content": None, "tool_calls": [{"name": "get_weather", "arguments": {"city": city}}]}
    return f"echo: {text}"
