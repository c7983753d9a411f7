"""A scripted model for the example agent: it plans tool calls from the user's message.

- "add 3 4 5": calls add, then reports the sum. Unless its instructions or a loaded skill tell it
  to always use the tool, it sometimes (seeded by the request) answers from memory, off by one.
- "note: a, b, c": one write_note call per item, one at a time, then "saved 3 notes".
- "clear notes": calls clear_notes (which needs approval), then reports what the tool said.
"""

import json
import random
import re

SLOPPY = 0.25


def respond(request):
    text = (request.last_user or "").strip()
    # Tool results since the user's last message: earlier turns of a session have their own.
    last_user = max((i for i, m in enumerate(request.messages) if m.get("role") == "user"), default=-1)
    done = [m for m in request.messages[last_user + 1:] if m.get("role") == "tool"]
    if text.startswith("add"):
        numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text)]
        if done:
            return f"The sum is {_fmt(float(done[-1]['content']))}."
        if "answer from memory" in request.system.lower():  # the demo's planted harmful rule
            return f"The sum is {_fmt(sum(numbers) + 1)}."
        careful = "never add in your head" in request.system.lower() or "always" in request.system.lower()
        # Keyed by the request and by how often it was seen: the same input gets the same sequence of
        # draws on every replay of the demo, yet repeats of one input do not all behave alike.
        draw = random.Random(f"{request.rng.random()}:{request.count}").random()
        if not careful and draw < SLOPPY:
            return f"The sum is {_fmt(sum(numbers) + 1)}."
        return {"tool_calls": [{"name": "add", "arguments": {"numbers": numbers}}]}
    if text.startswith("note:"):
        items = [part.strip() for part in text[len("note:"):].split(",") if part.strip()]
        if len(done) < len(items):
            return {"tool_calls": [{"name": "write_note", "arguments": {"text": items[len(done)]}}]}
        return f"saved {len(items)} notes"
    if text == "clear notes":
        if done:
            return f"done: {done[-1]['content']}"
        return {"tool_calls": [{"name": "clear_notes", "arguments": {}}]}
    return "I can add numbers, write notes and clear them."


def _fmt(value):
    return json.dumps(int(value) if float(value).is_integer() else value)
