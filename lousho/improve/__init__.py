"""improve: propose, test, apply and roll back edits to an agent's instructions and skills.

Names load on first use (PEP 562), so importing the package costs nothing until a step runs.
"""

from __future__ import annotations

from lousho.kernel._lazy import lazy_exports

_EXPORTS = {
    "Case": "lousho.improve.records",
    "ImproveResult": "lousho.improve.result",
    "ProbeResult": "lousho.improve.probe",
    "RunRecord": "lousho.improve.records",
    "StepOptions": "lousho.improve.options",
    "create_shadow_hook": "lousho.improve.probe",
    "format_improve_result": "lousho.improve.card",
    "harness_revision": "lousho.improve.harness",
    "improve_agent": "lousho.improve.step",
}

__all__, __getattr__ = lazy_exports("lousho.improve", _EXPORTS)
