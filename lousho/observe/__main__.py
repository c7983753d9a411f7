"""``python -m lousho.observe``: the daemon alone, without loading the other parts' commands."""

import sys

from lousho.errors import LoushoError
from lousho.observe.cli import observe

try:
    observe.main(prog_name="lousho observe", standalone_mode=True)
except LoushoError as e:
    print(f"error {e.code}: {e.message}", file=sys.stderr)
    if e.hint:
        print(f"hint: {e.hint}", file=sys.stderr)
    sys.exit(2 if e.code == "LOUSHO_USAGE" or e.code.startswith("LOUSHO_OBSERVE_UNSAFE") else 1)
