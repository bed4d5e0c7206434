"""The notebooks in ``notebooks/`` run top to bottom (their own asserts check what they show), without
errors or warnings, in a fresh kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS][:1] == ["01_customer_360_partial_updates.ipynb"]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_clean(path):
    notebook = nbformat.read(path, as_version=4)
    # the kernel starts in the repository root, so `assets` and `fluss_lake` import from this checkout
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code)
    stderr = [out.get("text", "") for cell in code for out in cell.outputs
              if out.get("output_type") == "stream" and out.get("name") == "stderr"]
    assert not stderr, stderr
