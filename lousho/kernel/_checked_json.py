"""JSON a file or a request body holds, parsed and checked against its contract in one step.

A leaf module: it imports nothing of ours, so every part whose files follow a JSON contract may use it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any

# A body's nesting is measured on its brackets alone, outside strings (which can hold brackets). Escaped
# backslashes go first, then escaped quotes (a backslash outside a string is not JSON anyway): then every quote
# left opens or closes a string, and the text between an odd and an even one is a string's.
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and, read as a signed byte, -1
_CHUNK = 1 << 20
# How a lone surrogate gets into what json.loads returns from UTF-8: an escape of one, or its (invalid) bytes.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE_BYTES = re.compile(rb"\xed[\xa0-\xbf]")


class NestedTooDeep(ValueError):
    """A JSON body nests arrays and objects past the reader's limit."""


def loads_checked(text: str, problem: Callable[[Any], str | None]) -> Any:
    """``text`` parsed; ``problem`` says why a parsed value breaks the contract (None: it keeps it).

    Raises ValueError with a message fit to follow the file's (and line's) name: ``not valid JSON: ...``
    or the problem. Callers turn it into their part's coded error.
    """
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not valid JSON: {e}") from None
    found = problem(data)
    if found:
        raise ValueError(found)
    return data


def nested_past(body: bytes, limit: int) -> bool:
    """Whether the JSON in ``body`` (any encoding ``json.loads`` detects) nests arrays and objects more than
    ``limit`` deep. Found without recursion and without parsing, so a request handler can refuse a body before
    ``json.loads`` recurses into it (its RecursionError is a 500 where nothing catches it, and the depth it
    allows depends on the thread's stack). Bytes that are not JSON give some answer; ``json.loads`` then
    refuses them either way."""
    encoding = json.detect_encoding(body)
    if not encoding.startswith("utf-8"):
        # UTF-16 and UTF-32 hold bracket-valued bytes inside other characters: measure the text as UTF-8.
        try:
            body = body.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        except UnicodeError:
            return False
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    if b"\\" in body:
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    steps = b"".join(body.split(b'"')[::2]).translate(_STEP, _NOT_BRACKET)
    depth = 0
    view = memoryview(steps).cast("b")
    for start in range(0, len(steps), _CHUNK):
        if max(accumulate(view[start:start + _CHUNK], initial=depth)) > limit:
            return True
        depth += steps.count(1, start, start + _CHUNK) - steps.count(255, start, start + _CHUNK)
    return False


def loads_bounded(body: bytes, max_depth: int) -> Any:
    """A request body parsed as ``json.loads`` parses it, refused first if it nests past ``max_depth``.

    Raises NestedTooDeep, or as ``json.loads`` does (``json.JSONDecodeError``, ``UnicodeDecodeError``: all
    ValueErrors), with a message fit for the caller's coded 400.
    """
    if nested_past(body, max_depth):
        raise NestedTooDeep(f"the body nests arrays and objects more than {max_depth} deep")
    return json.loads(body)


def may_hold_invalid_text(body: bytes) -> bool:
    """False when ``json.loads(body)`` cannot hold a lone surrogate, so ``invalid_text`` need not walk it: one
    scan of the bytes (a valid pair of escapes, an emoji, also says True)."""
    if not json.detect_encoding(body).startswith("utf-8"):
        return True
    return bool(_SURROGATE_ESCAPE.search(body) or (b"\xed" in body and _SURROGATE_BYTES.search(body)))


def invalid_text(value: Any) -> str | None:
    """The first key or string of a parsed JSON value that is not valid Unicode, shown escaped; or None.

    ``json.loads`` makes a lone surrogate of a ``\\ud800`` escape or of surrogate bytes, and no UTF-8 encoder
    takes one further (protobuf, DuckDB, a response), so a caller refuses it here, with its own code. Walked
    without recursion.
    """
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return ascii(item[:80])
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
