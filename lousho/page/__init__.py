"""The daemon's web page: runs, span trees, sessions, pass rates, the monitor, recovery and the audit log.

Mounted on observe's app by the CLI (``lousho observe``, ``lousho.page.cli``), so it may read analysis,
improve and recover; observe itself imports nothing from here.
"""

from __future__ import annotations

from lousho.kernel._lazy import lazy_exports

__all__, __getattr__ = lazy_exports("lousho.page", {
    "build_page": "lousho.page.app",
    "is_page_path": "lousho.page.app",
    "make_page": "lousho.page.cli",
})
