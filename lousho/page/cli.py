"""The web page at ``/`` of ``lousho observe``, built from the daemon's options.

Observe depends on no other part (DESIGN §1), while the page reads analysis, improve and recover; so the
entry point (``lousho.observe.entry``) hands ``make_page`` to the daemon command.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from lousho.observe.config import DaemonConfig
from lousho.observe.receive.http_app import Mounted, PageFactory
from lousho.observe.trigger.cycle import AgentSpec
from lousho.page.app import build_page, is_page_path
from lousho.page.recover import parse_store_url


def make_page(config: DaemonConfig, agents: tuple[AgentSpec, ...], recover_store: str | None) -> PageFactory:
    """The page for this daemon; raises ``BadRecoverStore`` (a usage error) for a ``--recover-store`` it cannot read."""
    # Absolute: the page reads it on request, whatever the working directory is then.
    store = parse_store_url(recover_store).resolve() if recover_store else None

    def build(reader_factory: Callable[[], duckdb.DuckDBPyConnection]) -> Mounted:
        app = build_page(reader_factory, token=config.token, agents_registered=agents, recover_store=store,
                         sql_timeout_s=config.sql_timeout_s)
        return Mounted(app, is_page_path)

    return build

