"""``python -m lousho.observe``: the daemon (``lousho observe``), without loading the other parts' commands.

It runs the command the way ``lousho observe`` does, through the entry point's table of commands: that is
where the daemon is given what observe itself may not import (``lousho.observe.entry``): its web page and the
improve and models parts' checks of ``--agent`` and the model URLs.
"""

import sys

from lousho.observe import memory_cap

memory_cap.before_duckdb_loads()

from lousho.cli import group, run  # noqa: E402 (the command table loads DuckDB: after its allocator's option)

run(group, ["observe", *sys.argv[1:]], prog_name="lousho")
