"""``python -m lousho.bench.heal``: the same command as ``lousho bench heal``."""

from lousho.bench.heal.cli import heal
from lousho.kernel.cli_support import run

run(heal, prog_name="lousho bench heal")
