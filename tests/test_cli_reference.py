"""docs/cli.md is written from the commands; a change to a command without rewriting it fails here."""

from __future__ import annotations

from lousho import cli_reference


def test_the_cli_reference_page_is_current() -> None:
    assert cli_reference.main(["--check"]) == 0, "run: python -m lousho.cli_reference"


def test_the_reference_lists_every_command() -> None:
    page = cli_reference.render()
    for command in ("lousho observe", "lousho improve step", "lousho improve audit", "lousho runs resume",
                    "lousho recover", "lousho stats"):
        assert f"## `{command}" in page
