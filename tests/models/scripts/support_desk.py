"""A scripted model for the models tests: each user message names what the model should do."""

from lousho.models.scripted import Fault

# "fault <name>" makes the script itself answer with a fault.
FAULTS = {
    "500": Fault.status(500),
    "503": Fault.status(503),
    "429": Fault.rate_limit(retry_after=2),
    "401": Fault.status(401),
    "context": Fault.context_length(),
    "hang": Fault.hang(5),
}


def respond(request):
    text = request.last_user or ""
    if request.last_tool is not None:
        return f"the {request.last_tool.name} tool said {request.last_tool.content}"
    if text.startswith("fault "):
        return FAULTS[text.split()[1]]
    if text == "random":
        return str(request.rng.random())
    if text == "count":
        return f"count={request.count}"
    if text == "raise":
        raise RuntimeError("the script broke")
    if text == "tools":
        return {
            "content": "checking",
            "tool_calls": [
                {"name": "lookup_order", "arguments": {"order_id": "A-1"}},
                {"name": "refund", "arguments": {"amount": 5, "reason": "late"}},
            ],
        }
    if text == "bad arguments":
        return {"tool_calls": [{"name": "lookup_order", "arguments": "{not json"}]}
    if text == "none":
        return None
    return f"echo: {text}"
