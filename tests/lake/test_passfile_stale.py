"""A killed daemon's catalog password does not stay on disk: the next passfile written removes it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from lousho.observe.lake.lake_client import remove_passfile, write_passfile

_WRITER = """
import sys, time
from pathlib import Path
from lousho.observe.lake.lake_client import write_passfile
print(write_passfile("h:5432:db:u:secret\\n", root=Path(sys.argv[1])), flush=True)
time.sleep(60)
"""


def test_a_sigkilled_writers_passfile_is_removed_by_the_next_and_a_live_ones_is_kept(tmp_path: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None
    killed = Path(writer.stdout.readline().strip())
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    writer.stdout.close()
    assert killed.read_text() == "h:5432:db:u:secret\n"  # SIGKILL left it, as it leaves any file
    live = write_passfile("h:5432:db:u:mine\n", root=tmp_path)  # this process's: alive
    unrelated = tmp_path / "lousho-lake-notapid"
    unrelated.mkdir()

    mine = write_passfile("h:5432:db:u:again\n", root=tmp_path)

    assert not killed.parent.exists()
    assert live.read_text() == "h:5432:db:u:mine\n" and mine.exists() and unrelated.is_dir()
    remove_passfile(live)
    remove_passfile(mine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lousho-lake-notapid"]
