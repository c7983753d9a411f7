"""A scripted editor for the example agent (demo and tests): it reads instructions.md, and when the
run records it was shown hold a wrong sum, it adds a rule to use the add tool; it asks nothing else.

The blind selector (a request whose system prompt starts "You compare edits") gets "A"; the reflection
session gets one fixed lesson.
"""

RULE = "Always call the add tool to add numbers; never add in your head."


def respond(request):
    if request.system.startswith("You compare edits"):
        return "A"
    if request.system.startswith("You reflect on one finished cycle"):
        return "Name the tool the agent must use for the task, not the answer it should give."
    user = next((m["content"] for m in request.messages if m.get("role") == "user"), "")
    if "invariant editor" not in request.system or "sum-correct" not in user:
        return "No edit to the instructions would fix these runs."
    results = [m["content"] for m in request.messages if m.get("role") == "tool"]
    if not results:
        return {"tool_calls": [{"name": "read_file", "arguments": {"path": "instructions.md"}}]}
    if len(results) == 1:
        content = results[0].rstrip("\n") + "\n- " + RULE + "\n"
        return {"tool_calls": [{"name": "write_file", "arguments": {"path": "instructions.md", "content": content}}]}
    return "The failed runs answered sums from memory, off by one; the new rule makes the agent use the tool."
