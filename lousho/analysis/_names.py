"""Names of the monitor rules and designs, in a module without SciPy so the CLI can list them cheaply."""

from __future__ import annotations

from typing import Literal, get_args

Rule = Literal["seed", "pocock", "obf", "spending", "spending-pocock"]
RULES: tuple[str, ...] = get_args(Rule)
# The monitor's comparisons (``monitor.MonitorConfig.design``), the default first.
DESIGNS: tuple[str, ...] = ("concurrent", "stratified", "seed")
