"""``lousho stats monitor`` and ``lousho stats gate``: JSON, plain text, a terminal table, errors."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from lousho.analysis.errors import BadInputError
from lousho.cli import group

LOUSHO = str(Path(sys.executable).parent / "lousho")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(group, ["stats", *args])


def test_monitor_json_has_the_documented_keys_and_the_seed_rule_figures() -> None:
    result = invoke("monitor", "--p0", "0.9", "--p1", "0.8", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {"false_alarm", "power", "power_by_look", "expected_runs", "boundaries"} <= set(data)
    assert data["false_alarm"] == pytest.approx(0.0369, abs=5e-5)
    assert data["power"] == pytest.approx(0.347, abs=5e-4)
    assert data["power_by_look"] == pytest.approx([0.105, 0.234, 0.347], abs=5e-4)
    assert data["boundaries"] == [2.1, 2.1, 2.1]


def test_monitor_json_for_pocock_has_the_1_992_boundary() -> None:
    result = invoke("monitor", "--p0", "0.9", "--p1", "0.8", "--rule", "pocock", "--json")
    assert json.loads(result.output)["boundaries"] == pytest.approx([1.992] * 3, abs=5e-4)


def test_monitor_handles_three_looks_up_to_200_runs_per_side() -> None:
    result = invoke(
        "monitor", "--p0", "0.9", "--p1", "0.8", "--rule", "spending", "--looks", "67,134,200",
        "--json",
    )
    data = json.loads(result.output)
    assert data["looks"] == [67, 134, 200]
    assert 0.8 < data["power"] < 0.9
    assert len(data["power_by_look"]) == 3


def test_monitor_prints_plain_text_when_not_a_terminal() -> None:
    result = invoke("monitor", "--p0", "0.9", "--p1", "0.8")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("seed rule")
    assert lines[-1].startswith("false alarm 0.0369, power 0.3475")
    assert not any(ch in result.output for ch in "┃━│")


def test_monitor_prints_a_rich_table_on_a_terminal() -> None:
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run(
            [LOUSHO, "stats", "monitor", "--p0", "0.9", "--p1", "0.8"],
            stdout=terminal,
            stderr=subprocess.PIPE,
            env={**os.environ, "COLUMNS": "120"},
            timeout=120,
            check=False,
        )
        os.close(terminal)
        terminal = -1
        output = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the pty reports EIO once the writer has gone
                break
            if not chunk:
                break
            output += chunk
    finally:
        if terminal != -1:
            os.close(terminal)
        os.close(controller)
    assert proc.returncode == 0, proc.stderr
    text = output.decode()
    assert "0.3475" in text and any(ch in text for ch in "┃━│")


def test_gate_json_pins_held_out_and_canary_figures() -> None:
    result = invoke("gate", "--p0", "0.9", "--p1", "0.7", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert rows["held_out_reject_always_rerun"]["no_change"] == pytest.approx(0.066, abs=5e-4)
    assert rows["held_out_reject"]["no_change"] == pytest.approx(0.054, abs=5e-4)
    assert rows["canary_pass"]["no_change"] == pytest.approx(0.886, abs=5e-4)
    assert rows["canary_pass"]["change"] == pytest.approx(0.420, abs=5e-4)
    assert rows["cost_fail"]["method"].startswith("simulated")


def test_gate_prints_every_rule_in_plain_text() -> None:
    result = invoke("gate", "--p0", "0.5")
    assert result.exit_code == 0
    for name in ("training_helped", "held_out_reject", "canary_pass", "paired_sign_gate", "cost_fail"):
        assert name in result.output


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["monitor", "--p0", "1.5", "--p1", "0.8"], "p0"),
        (["monitor", "--p0", "0.9", "--p1", "0"], "p1"),
        (["monitor", "--p0", "0.9", "--p1", "0.8", "--looks", "40,20,60"], "looks"),
        (["monitor", "--p0", "0.9", "--p1", "0.8", "--looks", "20,x"], "looks"),
        (["monitor", "--p0", "0.9", "--p1", "0.8", "--rule", "pocock", "--alpha", "1"], "alpha"),
        (["monitor", "--p0", "0.9", "--p1", "0.8", "--alpha", "0.05"], "alpha"),
        (["gate", "--p0", "0.9", "--cases", "0"], "cases"),
        (["gate", "--p0", "0.9", "--canary-min", "7"], "canary_min"),
    ],
)
def test_bad_input_raises_the_stats_usage_error(args: list[str], name: str) -> None:
    result = invoke(*args)
    assert isinstance(result.exception, BadInputError), result.output
    assert result.exception.name == name


def test_the_lousho_command_prints_the_code_and_hint_and_exits_2_on_bad_input() -> None:
    proc = subprocess.run(
        [LOUSHO, "stats", "monitor", "--p0", "1.5", "--p1", "0.8"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error LOUSHO_STATS_BAD_INPUT: p0=1.5")
    assert "\nhint: " in proc.stderr
    assert "Traceback" not in proc.stderr
