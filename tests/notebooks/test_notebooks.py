"""The notebooks in notebooks/ run top to bottom against a fresh demo store, and are committed clean."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


@pytest.fixture(scope="module")
def demo_dir(demo_run) -> Path:  # type: ignore[no-untyped-def]
    """What `make demo` leaves behind: observe.duckdb, agent/ with its .lousho/ loop state, runs.db."""
    return demo_run.dir


def test_the_three_notebooks_exist_and_are_committed_without_outputs():
    assert [p.name for p in NOTEBOOKS] == ["01-runs.ipynb", "02-monitor.ipynb", "03-improve.ipynb"]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata["kernelspec"]["name"] == "python3", path.name
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear the outputs"


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_every_cell_against_the_demo_store_and_draws_its_figures(
    path: Path, demo_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    """nbclient raises CellExecutionError, naming the cell and its traceback, on the first failing cell."""
    monkeypatch.setenv("LOUSHO_DEMO_DIR", str(demo_dir))  # the kernel inherits the environment
    nb = nbformat.read(path, as_version=4)
    # Run from notebooks/, as Jupyter does; "python3" is ipykernel's native kernel in this interpreter.
    client = NotebookClient(nb, kernel_name="python3", timeout=300,
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    client.execute()
    images = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
              if out.output_type == "display_data" and "image/png" in out.get("data", {})]
    assert images, f"{path.name} drew no figure"
