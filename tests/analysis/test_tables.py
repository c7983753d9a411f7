"""docs/statistics.md is generated from the code and must match it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lousho.analysis import tables


@pytest.mark.slow
def test_docs_statistics_is_what_the_generator_writes_today() -> None:
    """If this fails, run ``.venv/bin/python -m lousho.analysis.tables`` and commit the page."""
    assert tables.DOC.read_text(encoding="utf-8") == tables.render()


@pytest.mark.slow
def test_check_mode_flags_a_stale_page_and_writing_fixes_it(tmp_path: Path) -> None:
    page = tmp_path / "statistics.md"
    page.write_text("stale\n", encoding="utf-8")
    assert tables.main(["--check", "--out", str(page)]) == 1
    assert tables.main(["--out", str(page)]) == 0
    assert tables.main(["--check", "--out", str(page)]) == 0


def test_the_page_carries_the_anchor_figures_and_its_regeneration_command() -> None:
    text = tables.DOC.read_text(encoding="utf-8")
    assert tables.COMMAND in text
    for figure in ("1.992", "2.289", "0.0369", "0.105 / 0.234 / 0.347", "0.886", "0.066"):
        assert figure in text
