"""``python -m lousho.observe``: the daemon (``lousho observe``), without loading the other parts' commands.

It runs the command the way ``lousho observe`` does, through the entry point's table of commands: that is
where the daemon is given its web page (``lousho.page.cli``), which observe itself may not import.
"""

import sys

from lousho.cli import group, run

run(group, ["observe", *sys.argv[1:]], prog_name="lousho")
