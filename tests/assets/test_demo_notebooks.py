"""The notebooks in ``notebooks/`` are committed executed, and their outputs are current: a fresh run in a new
kernel (their own asserts check what they show) gives the stored outputs again, without errors or warnings.

The stored outputs are made by ``python notebooks/regenerate.py`` (the same execution and normalisation this test
uses); when a change alters what a notebook shows, this test fails naming the cells: run that command and commit
the notebooks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import tempfile
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("notebooks_regenerate", REPO / "notebooks" / "regenerate.py")
assert _SPEC is not None and _SPEC.loader is not None
regenerate = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(regenerate)

NOTEBOOKS = regenerate.notebook_paths()
#: what no stored output may hold: this machine's folders (the temporary folder, the home, the checkout and the folder
#: above it), found when the test runs, and Windows drive paths
MACHINE_PATHS = re.compile(
    "|".join(
        re.escape(str(folder).rstrip(os.sep) + os.sep)
        for folder in {Path(tempfile.gettempdir()), Path.home(), REPO, REPO.parent}
        if str(folder) not in ("", os.sep)
    )
    + r"|[A-Z]:\\\\"
)


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS][:1] == ["01_customer_360_partial_updates.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_are_stored_executed_without_machine_paths(path):
    """Someone reading the notebook on the web sees its tables and figures, none of this machine's paths."""
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code), "run `python notebooks/regenerate.py`"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))  # top to bottom, once
    outputs = json.dumps([cell.outputs for cell in code])
    assert sum(bool(cell.outputs) for cell in code) >= len(code) // 2
    assert not MACHINE_PATHS.search(outputs), MACHINE_PATHS.search(outputs)
    assert notebook == regenerate.normalize(notebook)  # stored as the command stores them


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_clean_and_its_outputs_are_current(path):
    fresh = regenerate.execute(path)  # the kernel starts in the repository root: this checkout is imported
    code = [cell for cell in fresh.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code)
    stderr = [out.get("text", "") for cell in code for out in cell.outputs
              if out.get("output_type") == "stream" and out.get("name") == "stderr"]
    assert not stderr, stderr
    found = regenerate.differences(nbformat.read(path, as_version=4), fresh)
    assert not found, (f"{path.name}: the stored outputs are stale; run `python notebooks/regenerate.py` and "
                       "commit the notebooks\n" + "\n".join(found))


def test_the_comparison_sees_a_changed_output_and_ignores_volatile_parts():
    """differences() fails on a changed table value or a missing figure, not on paths, addresses, stream
    chunking or execution metadata."""
    stored = nbformat.read(NOTEBOOKS[1], as_version=4)
    assert regenerate.differences(stored, stored) == []
    rerun = nbformat.read(NOTEBOOKS[1], as_version=4)  # the same run as the kernel may report it
    cell = next(c for c in rerun.cells if c.cell_type == "code" and any(o.output_type == "stream" for o in c.outputs))
    at = next(i for i, o in enumerate(cell.outputs) if o.output_type == "stream")
    text = cell.outputs[at].text
    cut = text.index("\n") + 1
    cell.outputs[at:at + 1] = [nbformat.v4.new_output("stream", name="stdout", text=text[:cut]),
                               nbformat.v4.new_output("stream", name="stdout", text=text[cut:])]
    cell.metadata["execution"] = {"iopub.status.busy": "2030-01-01T00:00:00Z"}
    rerun.metadata["language_info"] = {"name": "python", "version": "3.99.0"}
    assert regenerate.differences(stored, rerun)  # split prints differ as such ...
    assert regenerate.differences(stored, regenerate.normalize(rerun)) == []  # ... and are one once normalised
    assert regenerate.normalize(rerun) == stored
    assert regenerate.scrub(f"store at {regenerate.REPO}/x and /tmp/c360-abc/y, <T at 0x7f3a9c>") == \
        "store at <repo>/x and <tmp>, <T at 0x…>"
    changed = nbformat.read(NOTEBOOKS[1], as_version=4)
    shown = next(c for c in changed.cells if c.cell_type == "code" and any("data" in o for o in c.outputs))
    output = next(o for o in shown.outputs if "data" in o)
    output.data["text/plain"] = output.data["text/plain"] + " "
    assert regenerate.differences(stored, changed)
    figure = nbformat.read(NOTEBOOKS[1], as_version=4)
    for c in figure.cells:
        for o in c.get("outputs", []):
            o.get("data", {}).pop("image/png", None)
    assert regenerate.differences(stored, figure)
