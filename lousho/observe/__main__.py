"""``python -m lousho.observe``: the daemon alone, without loading the other parts' commands."""

from lousho.cli_support import run
from lousho.observe.cli import observe

run(observe, prog_name="lousho observe")
