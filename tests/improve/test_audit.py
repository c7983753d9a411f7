"""audit: a hash-chained log whose verify names the first line an edit, removal, reorder, insertion or
truncation broke, and whose appends stay one chain across threads and processes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from lousho.improve.audit import GENESIS, AuditCorrupt, append, entries, verify
from lousho.improve.audit_cli import audit
from lousho.improve.state import Paths

ACTIONS = [
    ("cycle_start", {"trigger": "schedule"}),
    ("proposal", {"edit": "Always call the add tool.", "proposal_id": "p1"}),
    ("gate", {"passed": True, "scores": {"base": 0.5, "candidate": 0.9}}),
    ("apply", {"revision": "r2", "files": ["AGENTS.md"]}),
    ("monitor", {"look": 1, "z": 0.4}),
    ("lesson_vote", {"lesson": "l1", "helped": True}),
    ("rollback", {"revision": "r1", "reason": "z >= 2.1"}),
    ("cycle_end", {"tokens": 1234}),
]


def sha(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def build_log(agent_dir: Path) -> Paths:
    paths = Paths(agent_dir)
    for action, fields in ACTIONS:
        append(paths, action, **fields)
    return paths


def read_lines(paths: Paths) -> list[bytes]:
    return paths.audit.read_bytes().splitlines()


def write_lines(paths: Paths, lines: list[bytes]) -> None:
    paths.audit.write_bytes(b"".join(line + b"\n" for line in lines))


def cli_verify(agent_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho.improve.audit_cli", str(agent_dir), "--verify"],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def log(tmp_path: Path) -> Paths:
    return build_log(tmp_path)


def test_each_line_is_sorted_json_chained_to_the_exact_bytes_before_it(log: Paths) -> None:
    lines = read_lines(log)
    assert len(lines) == len(ACTIONS)
    for number, raw in enumerate(lines, 1):
        entry = json.loads(raw)
        assert raw == json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
        assert entry["seq"] == number
        assert entry["action"] == ACTIONS[number - 1][0]
        assert entry["prev"] == (sha(lines[number - 2]) if number > 1 else GENESIS)
        assert entry["at"].endswith("+00:00")
    assert json.loads(log.audit_head.read_text()) == {"count": 8, "hash": sha(lines[-1])}
    assert entries(log)[2]["scores"] == {"base": 0.5, "candidate": 0.9}


def test_an_untouched_log_verifies_and_the_cli_exits_0(log: Paths) -> None:
    verdict = verify(log)
    assert (verdict.ok, verdict.lines, verdict.first_bad) == (True, 8, None)
    done = cli_verify(log.agent_dir)
    assert (done.returncode, done.stdout.strip()) == (0, "audit: ok (8 lines)"), done.stderr


def test_a_directory_without_a_log_or_head_verifies_as_empty(tmp_path: Path) -> None:
    verdict = verify(Paths(tmp_path))
    assert (verdict.ok, verdict.lines, verdict.first_bad) == (True, 0, None)
    assert CliRunner().invoke(audit, [str(tmp_path), "--verify"]).output == "audit: ok (0 lines)\n"


def _edit_middle(paths: Paths) -> None:
    lines = read_lines(paths)
    entry = json.loads(lines[3])
    entry["files"] = ["SKILL.md"]  # still valid JSON, same seq and prev
    lines[3] = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    write_lines(paths, lines)


def _remove_middle(paths: Paths) -> None:
    lines = read_lines(paths)
    del lines[3]
    write_lines(paths, lines)


def _swap(paths: Paths) -> None:
    lines = read_lines(paths)
    lines[2], lines[3] = lines[3], lines[2]
    write_lines(paths, lines)


def _insert_forged(paths: Paths) -> None:
    lines = read_lines(paths)
    forged = {"action": "apply", "at": json.loads(lines[2])["at"], "prev": sha(lines[2]), "seq": 4,
              "revision": "evil"}
    lines.insert(3, json.dumps(forged, sort_keys=True, separators=(",", ":")).encode())
    write_lines(paths, lines)


def _truncate_tail(paths: Paths) -> None:
    write_lines(paths, read_lines(paths)[:-2])


def _edit_last(paths: Paths) -> None:
    # The field, not the bytes "1234": those also turn up in the line's ``prev`` hash about once in 1,000 logs.
    lines = read_lines(paths)
    entry = json.loads(lines[-1])
    entry["tokens"] = 1
    lines[-1] = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    write_lines(paths, lines)


def _delete_head(paths: Paths) -> None:
    paths.audit_head.unlink()


def _break_json(paths: Paths) -> None:
    lines = read_lines(paths)
    lines[4] = lines[4][:-1]
    write_lines(paths, lines)


@pytest.mark.parametrize(("tamper", "first_bad", "words"), [
    (_edit_middle, 4, "line 4 was edited"),
    (_remove_middle, 4, "line 4 is out of order: seq 5"),
    (_swap, 3, "line 3 is out of order: seq 4"),
    (_insert_forged, 4, "line 4 was inserted: line 5 chains to line 3"),
    (_truncate_tail, 7, "the log ends at line 6 but the head says 8 lines: the tail was truncated"),
    (_edit_last, 8, "line 8 was edited"),
    (_delete_head, 8, "head file audit.head.json is missing"),
    (_break_json, 5, "line 5 is not valid JSON"),
], ids=lambda value: getattr(value, "__name__", None))
def test_tampering_is_found_at_the_first_bad_line_and_the_cli_exits_1(
    log: Paths, tamper: Callable[[Paths], None], first_bad: int, words: str
) -> None:
    tamper(log)
    verdict = verify(log)
    assert not verdict.ok
    assert verdict.first_bad == first_bad, verdict.reason
    assert words in verdict.reason
    done = cli_verify(log.agent_dir)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith(f"audit: BROKEN at line {first_bad}: "), done.stdout


def test_a_line_appended_without_the_head_is_reported(log: Paths) -> None:
    """A forged append with a correct prev and seq (or a crash between the log and the head)."""
    lines = read_lines(log)
    extra = {"action": "apply", "at": "2030-01-01T00:00:00+00:00", "prev": sha(lines[-1]), "seq": 9}
    write_lines(log, [*lines, json.dumps(extra, sort_keys=True).encode()])
    verdict = verify(log)
    assert (verdict.ok, verdict.first_bad) == (False, 9)
    assert "head says 8" in verdict.reason


def test_a_cut_off_last_line_is_reported(log: Paths) -> None:
    log.audit.write_bytes(log.audit.read_bytes()[:-1])  # only the final newline is gone
    verdict = verify(log)
    assert (verdict.ok, verdict.first_bad) == (False, 8)
    assert "no line end" in verdict.reason


def test_append_after_tampering_keeps_the_event_and_chains_to_the_actual_last_line(log: Paths) -> None:
    head = log.audit_head.read_text()
    _truncate_tail(log)
    entry = append(log, "rollback", revision="r1")
    lines = read_lines(log)
    assert entry["seq"] == 7 and entry["prev"] == sha(lines[5])
    assert json.loads(lines[-1]) == entry
    # The head is left as it was: the truncation stays reported after the append.
    assert log.audit_head.read_text() == head
    assert not verify(log).ok
    # An edit in the middle is still reported after more appends.
    _edit_middle(log)
    append(log, "cycle_end")
    verdict = verify(log)
    assert (verdict.ok, verdict.first_bad) == (False, 4)


@pytest.mark.parametrize("tamper", [_truncate_tail, _edit_last, _delete_head, _remove_middle],
                         ids=lambda value: value.__name__)
def test_routine_appends_after_tampering_never_make_the_log_verify_again(log: Paths,
                                                                         tamper: Callable[[Paths], None]) -> None:
    # The loop appends on every tick and cycle: the first of them must not wash a tampered tail or head clean.
    tamper(log)
    assert not verify(log).ok
    for i in range(3):
        append(log, "cycle-refused", reason=f"tick {i}")
        assert not verify(log).ok, f"the tampering ({tamper.__name__}) verified after {i + 1} appends"
    assert [e["action"] for e in entries(log)][-3:] == ["cycle-refused"] * 3


def test_append_after_a_cut_off_line_starts_a_new_line(log: Paths) -> None:
    log.audit.write_bytes(log.audit.read_bytes()[:-10])
    append(log, "cycle_start")
    lines = read_lines(log)
    assert len(lines) == 9 and json.loads(lines[-1])["prev"] == sha(lines[7])
    assert verify(log).first_bad == 8


def test_model_text_is_stored_as_plain_text(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    text = "Fix it [here](https://evil.example/x) ![p](http://a.b/c.png) <script>alert(1)</script>done"
    entry = append(paths, "proposal", edit=text, notes=[text], meta={"why": text}, count=3)
    stored = entries(paths)[0]
    assert stored == entry
    for value in (stored["edit"], stored["notes"][0], stored["meta"]["why"]):
        assert "http" not in value and "<" not in value and "](" not in value
        assert value.startswith("Fix it here")
    assert stored["count"] == 3
    assert verify(paths).ok


def test_reserved_keys_and_values_json_cannot_hold_are_refused_before_writing(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    with pytest.raises(TypeError, match="reserved"):
        append(paths, "apply", seq=5)
    with pytest.raises(TypeError):
        append(paths, "apply", when=object())
    with pytest.raises(TypeError):
        append(paths, "apply", z=float("nan"))
    assert not paths.audit.exists() and not paths.audit_head.exists()


def test_entries_raises_a_clear_error_on_a_broken_line(log: Paths) -> None:
    _break_json(log)
    with pytest.raises(AuditCorrupt, match="line 5 is not a JSON object") as caught:
        entries(log)
    assert caught.value.code == "LOUSHO_IMPROVE_AUDIT_CORRUPT"


def test_threads_appending_at_once_make_one_chain(tmp_path: Path) -> None:
    paths = Paths(tmp_path)

    def work(worker: int) -> None:
        for i in range(25):
            append(paths, "tick", worker=worker, i=i)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    verdict = verify(paths)
    assert (verdict.ok, verdict.lines) == (True, 100), verdict.reason


WORKER = """
import sys
from pathlib import Path
from lousho.improve.audit import append
from lousho.improve.state import Paths
paths = Paths(Path(sys.argv[1]))
for i in range(25):
    append(paths, "tick", worker=int(sys.argv[2]), i=i)
"""


def test_processes_appending_at_once_make_one_chain(tmp_path: Path) -> None:
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(w)]) for w in range(4)]
    assert [worker.wait(timeout=120) for worker in workers] == [0, 0, 0, 0]
    paths = Paths(tmp_path)
    verdict = verify(paths)
    assert (verdict.ok, verdict.lines) == (True, 100), verdict.reason
    seen = {(e["worker"], e["i"]) for e in entries(paths)}
    assert seen == {(w, i) for w in range(4) for i in range(25)}


def test_cli_lists_entries_one_a_line(log: Paths) -> None:
    result = CliRunner().invoke(audit, [str(log.agent_dir)])
    assert result.exit_code == 0, result.output
    rows = result.output.splitlines()
    assert len(rows) == 8
    assert rows[0].startswith("1 ") and " cycle_start trigger=\"schedule\"" in rows[0]
    assert "prev" not in result.output
    assert rows[3].endswith('apply files=["AGENTS.md"] revision="r2"')


def test_cli_verify_reports_a_broken_log_with_exit_1(log: Paths) -> None:
    _remove_middle(log)
    result = CliRunner().invoke(audit, [str(log.agent_dir), "--verify"])
    assert result.exit_code == 1
    assert result.output.startswith("audit: BROKEN at line 4: line 4 is out of order")


def test_cli_refuses_a_missing_directory(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "lousho.improve.audit_cli", str(tmp_path / "nope"), "--verify"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "LOUSHO_IMPROVE_AUDIT_NO_DIR" in done.stderr


def test_cli_listing_a_corrupt_log_fails_with_the_error_code(log: Paths) -> None:
    _break_json(log)
    done = subprocess.run([sys.executable, "-m", "lousho.improve.audit_cli", str(log.agent_dir)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "error LOUSHO_IMPROVE_AUDIT_CORRUPT: " in done.stderr and "line 5" in done.stderr


def test_a_first_append_cut_short_before_or_after_its_line_verifies_and_the_next_completes_it(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    append(paths, "cycle-start")
    # Cut short after the head named the coming line, before the line: an empty log.
    paths.audit.write_bytes(b"")
    paths.audit_head.write_text(json.dumps({"count": 0, "hash": GENESIS, "pending": {"count": 1, "hash": "x"}}))
    assert verify(paths).ok
    # Cut short after the line, before the head: one line the pending head names.
    paths.audit.unlink()
    paths.audit_head.unlink()
    entry = append(paths, "cycle-start")
    line = read_lines(paths)[0]
    paths.audit_head.write_text(json.dumps({"count": 0, "hash": GENESIS, "pending": {"count": 1, "hash": sha(line)}}))
    assert verify(paths).ok and entry["seq"] == 1
    append(paths, "cycle-end")
    assert verify(paths).ok and json.loads(paths.audit_head.read_text())["count"] == 2
