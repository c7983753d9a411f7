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
from lousho.page.data import Reader
from lousho.page.recover import parse_store_url


def make_page(config: DaemonConfig, agents: tuple[AgentSpec, ...], recover_store: str | None) -> PageFactory:
    """The page for this daemon; raises ``BadRecoverStore`` (a usage error) for a ``--recover-store`` it cannot read."""
    # Absolute: the page reads it on request, whatever the working directory is then.
    store = parse_store_url(recover_store).resolve() if recover_store else None

    open_reader = _lake_reader(config) if config.page_scope == "lake" else None

    def build(reader_factory: Callable[[], duckdb.DuckDBPyConnection]) -> Mounted:
        app = build_page(reader_factory, token=config.token, agents_registered=agents, recover_store=store,
                         sql_timeout_s=config.sql_timeout_s, open_reader=open_reader)
        return Mounted(app, is_page_path)

    return build



def _lake_reader(config: DaemonConfig) -> Callable[[float], Reader]:
    """Every daemon's runs on the page (``--page-scope lake``): its queries go to a read-only lake process of its own,
    one at a time, under the SQL API's checks."""
    from lousho.observe.lake.lake_client import LakeTarget
    from lousho.observe.lake.lake_query import LakeReader

    assert config.lake_catalog is not None and config.lake_data is not None
    lake = LakeReader(LakeTarget(config.lake_catalog, str(config.lake_data)), config.lake_python)

    timeout = config.lake_sql_timeout_s

    def open_reader(_page_timeout: float) -> Reader:  # the lake's own limit, not the page's
        return Reader(None, timeout, query=lambda sql, params, rows: lake.run(sql, params, timeout=timeout,
                                                                               max_rows=rows))

    return open_reader
