"""Pure helpers every store backend shares: JSON in and out of TEXT columns, and UTC timestamps as TEXT."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from lousho.recover.errors import CheckpointCorrupt, OutputNotJson

# Fixed width, so that timestamps compare as strings in SQL (schema.py explains why TEXT). format_utc writes it
# with isoformat (half the cost of strftime: it runs on every checkpoint).
_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def utc_now() -> str:
    # Already UTC: format_utc's conversion is skipped (this runs on every checkpoint).
    return datetime.now(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def format_utc(moment: datetime) -> str:
    """``moment`` as stored; a naive datetime is refused (its zone is a guess)."""
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {moment!r} has no time zone; pass an aware datetime (UTC)")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_utc(text: str) -> datetime:
    return datetime.strptime(text, _TS_FORMAT).replace(tzinfo=UTC)


# One encoder for every value: json.dumps with options other than its defaults builds a new one per call.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def encode(value: Any, *, run_id: str, step: int | None = None) -> str:
    """Sorted-key compact JSON (DESIGN §7), refusing what JSON cannot hold: NaN and infinities (which
    Postgres's json would refuse too), sets, arbitrary objects."""
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError) as e:
        raise OutputNotJson(run_id, step, str(e)) from e


def decode(
    text: str | None, *, run_id: str, step: int | None, column: str, location: str, owner: str = "run",
) -> Any:
    """A stored JSON value; a row that does not decode is ``CheckpointCorrupt``, never a ``JSONDecodeError``."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as e:
        raise CheckpointCorrupt(run_id, step, column, location, owner) from e
