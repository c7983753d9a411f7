"""The scripted "provider" for the example: ``lousho models serve-scripted --script policy.py``.

It stands in for a real model, deterministically, in two roles:

- The order desk's model. It looks an order up with the id exactly as the customer wrote it, so a lower-case
  id (a-3) finds nothing and the answer misses the status: the planted regression when customers start writing
  ids in lower case. With the rule below in its instructions it writes ids in upper case: the fixable failure.
- The improve loop's editor. The invariant editor reads instructions.md and adds that rule; the other editors
  propose nothing.
"""

import json
import re

RULE = "Order ids are upper case (A-3, not a-3): write the id in upper case when you call lookup_order."
_ORDER_ID = re.compile(r"\b([A-Za-z]-\d+)\b")


def respond(request):
    if "You edit the agent's harness" in request.system:
        return _editor(request)
    return _order_desk(request)


def _order_desk(request):
    if request.last_tool is None:
        found = _ORDER_ID.search(request.last_user or "")
        if found is None:
            return "Which order do you mean? Please give me its id, like A-1."
        order_id = found.group(1).upper() if "upper case" in request.system else found.group(1)
        return {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": order_id}}]}
    result = json.loads(request.last_tool.content)
    if "error" in result:
        return "I could not find that order; please check its id."
    return f"Order {result['order_id']} is {result['status']}; expected delivery: {result['eta']}."


def _editor(request):
    user = next((m["content"] for m in request.messages if m.get("role") == "user"), "")
    if "invariant editor" not in request.system or "names-order-status" not in user:
        return "No edit to the instructions would fix these runs."
    results = [m["content"] for m in request.messages if m.get("role") == "tool"]
    if not results:
        return {"tool_calls": [{"name": "read_file", "arguments": {"path": "instructions.md"}}]}
    if len(results) == 1:
        content = results[0].rstrip("\n") + "\n- " + RULE + "\n"
        return {"tool_calls": [{"name": "write_file", "arguments": {"path": "instructions.md", "content": content}}]}
    return "The failed runs looked lower-case ids up as written and found nothing; the rule makes ids upper case."
