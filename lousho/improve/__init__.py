"""improve: propose, test, apply and roll back edits to an agent's instructions and skills.

Names load on first use (PEP 562), so importing the package costs nothing until a step runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Case": "lousho.improve.records",
    "ImproveResult": "lousho.improve.result",
    "RunRecord": "lousho.improve.records",
    "create_shadow_hook": "lousho.improve.probe",
    "format_improve_result": "lousho.improve.card",
    "improve_agent": "lousho.improve.step",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lousho.improve' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
