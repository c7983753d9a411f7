"""The heal benchmark (seed §5, §6 and its appendix): the eleven loop scenarios with their bars, the
failure-name study and the layout check, on a synthetic coding project with hidden tests.

``lousho bench heal --scenarios all --out FILE.jsonl`` runs it; ``--report`` prints each bar and the
verdict. From Python: :func:`run` with :class:`Options`, then :func:`report` on :func:`read_rows`.
Names load on first use (PEP 562): the agent's tools import ``lousho.bench.heal.layout`` alone.
"""

from __future__ import annotations

from lousho.kernel._lazy import lazy_exports

_EXPORTS = {
    "ALL": "lousho.bench.heal.run",
    "Options": "lousho.bench.heal.run",
    "read_rows": "lousho.bench.heal.rows",
    "report": "lousho.bench.heal.report",
    "run": "lousho.bench.heal.run",
}

__all__, __getattr__ = lazy_exports("lousho.bench.heal", _EXPORTS)
