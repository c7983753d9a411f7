"""``lousho stats``: operating characteristics of the monitor and gate rules."""

from __future__ import annotations

import click


@click.group()
def stats() -> None:
    """Exact operating characteristics of the loop's decision rules."""
