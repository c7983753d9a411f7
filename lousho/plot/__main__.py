"""``python -m lousho.plot``: the ``lousho plot`` group on its own (as the lousho command runs it)."""

from lousho.kernel.cli_support import run
from lousho.plot.cli import plot

run(plot, prog_name="lousho plot")
