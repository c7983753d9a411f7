"""The eleven scenarios of the heal benchmark (seed §6.3): each a function of one
:class:`~lousho.bench.heal.bench.Attempt` returning a :class:`~lousho.bench.heal.scenarios.common.Result`
on its must-happen. Their bars and models are in :mod:`lousho.bench.heal.catalog`.
"""

from __future__ import annotations

from collections.abc import Callable

from lousho.bench.heal.bench import Attempt
from lousho.bench.heal.catalog import SCENARIOS
from lousho.bench.heal.scenarios import controls, edits, watch
from lousho.bench.heal.scenarios.common import Result

RUNNERS: dict[str, Callable[[Attempt], Result]] = {
    "true-fix": edits.true_fix,
    "planted-editor": edits.planted_editor,
    "planted-forced": watch.planted_forced,
    "no-op": edits.no_op,
    "injection": edits.injection,
    "healthy": watch.healthy,
    "kill-switch": controls.kill_switch,
    "manual": controls.manual,
    "canary-traffic": watch.canary_traffic,
    "budget": controls.budget,
    "stable-monitor": watch.stable_monitor,
}
assert set(RUNNERS) == {s.name for s in SCENARIOS}
