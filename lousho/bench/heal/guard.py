"""The live guard: the benchmark runs only on an observe database where every run is its own.

The loop reads cases from the observe store and shows their transcripts to the editors; with a live
editor model they leave the machine. So before each attempt and before each editor call the guard
checks that every span in the database belongs to an agent named ``heal-bench-...`` (as the source
report's loop script does), and stops the benchmark otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lousho.bench.heal.errors import LiveGuardTripped

if TYPE_CHECKING:
    import polars as pl

Sql = Callable[[str, list[object]], "pl.DataFrame"]  # a store client's sql(query, params)

PREFIX = "heal-bench-"

# Any span counts, not only runs: a foreign service's spans are someone else's data all the same.
_FOREIGN = ("SELECT DISTINCT coalesce(agent_name, service_name, '(unnamed)') AS agent FROM spans "
            "WHERE coalesce(agent_name, service_name, '') NOT LIKE ? ORDER BY agent LIMIT 20")


def foreign_agents(sql: Sql) -> list[str]:
    """Names of agents (or services) in the store that are not the benchmark's."""
    frame = sql(_FOREIGN, [PREFIX + "%"])
    return [str(a) for a in frame["agent"].to_list()]


@dataclass
class Guard:
    """Checks the store on each call; raises :class:`LiveGuardTripped` at the first foreign run."""

    sql: Sql
    checks: int = 0

    def __call__(self, where: str = "before an editor call") -> None:
        self.checks += 1
        foreign = foreign_agents(self.sql)
        if foreign:
            raise LiveGuardTripped(foreign, where)
