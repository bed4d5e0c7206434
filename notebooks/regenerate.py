"""Execute the notebooks and store them with their outputs, or check that the stored outputs are still current.

From the repository root::

    python notebooks/regenerate.py                  # execute every notebook, store it with its outputs
    python notebooks/regenerate.py --check          # exit 1, naming the cells, if a fresh run gives other outputs
    python notebooks/regenerate.py 02_delta_join_vs_stateful_join.ipynb     # only these (names or paths)

Each notebook runs top to bottom in a fresh ``python3`` kernel started in the repository root, so ``fluss_lake``,
``tiering`` and ``assets`` import from this checkout. The notebooks use seeded data, so their tables and figures
are the same on every run; what is not (where a temporary folder landed, object addresses, the kernel's Python
version, execution times in the metadata) is normalised before storing and comparing. Figures are compared by
kind only (an ``image/png`` is there or not): their bytes follow the installed matplotlib and freetype.
``tests/assets/test_demo_notebooks.py`` runs the same comparison in CI.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent
REPO = NOTEBOOKS.parent
TIMEOUT_S = 600

#: (pattern, replacement) applied to every text output: machine-specific values that are not the demo's.
_SCRUB = [
    (re.compile(re.escape(str(REPO))), "<repo>"),
    (re.compile(re.escape(str(Path(tempfile.gettempdir()).resolve())) + r"[\w./-]*"), "<tmp>"),
    (re.compile(r"/tmp/[\w./-]*"), "<tmp>"),
    (re.compile(r" at 0x[0-9a-f]+"), " at 0x…"),
]
_TEXT_TYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json")


def notebook_paths(names: list[str] | None = None) -> list[Path]:
    """The notebooks of this folder (or the named ones), sorted."""
    if not names:
        return sorted(NOTEBOOKS.glob("*.ipynb"))
    paths = [Path(n) if Path(n).suffix == ".ipynb" and Path(n).exists() else NOTEBOOKS / Path(n).name for n in names]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"no such notebook(s): {missing}")
    return paths


def scrub(text: str) -> str:
    """`text` without this machine's paths and object addresses."""
    for pattern, replacement in _SCRUB:
        text = pattern.sub(replacement, text)
    return text


def normalize(notebook: Any) -> Any:
    """The notebook as it is stored: outputs scrubbed, no execution times, no kernel version."""
    notebook = copy.deepcopy(notebook)
    notebook.metadata = nbformat.from_dict(
        {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        }
    )
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        cell.outputs = _merged_streams(cell.outputs)
        for output in cell.outputs:
            output.pop("transient", None)
            if "text" in output:
                output.text = scrub(output.text)
            for kind, value in output.get("data", {}).items():
                if kind in _TEXT_TYPES:
                    output.data[kind] = scrub(value) if isinstance(value, str) else json.loads(scrub(json.dumps(value)))
    return notebook


def _merged_streams(outputs: list[Any]) -> list[Any]:
    """Consecutive stdout (or stderr) outputs as one: how the kernel chunks a cell's prints varies by run."""
    merged: list[Any] = []
    for output in outputs:
        last = merged[-1] if merged else None
        if (
            output.output_type == "stream"
            and last is not None
            and last.output_type == "stream"
            and last.name == output.name
        ):
            last.text += output.text
        else:
            merged.append(output)
    return merged


def execute(path: Path) -> Any:
    """Run the notebook at `path` in a fresh kernel (in the repository root); the normalised result."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    )
    client.execute()
    return normalize(notebook)


def comparable(notebook: Any) -> list[dict[str, Any]]:
    """What must match between a stored and a fresh run: each cell's source and outputs, figures by kind only."""
    cells = []
    for cell in notebook.cells:
        outputs = []
        for output in cell.get("outputs", []):
            entry = {k: v for k, v in output.items() if k not in ("data", "metadata")}
            if "data" in output:
                entry["data"] = {k: (v if k in _TEXT_TYPES else f"<{k}>") for k, v in output["data"].items()}
            outputs.append(entry)
        cells.append({"type": cell.cell_type, "source": cell.source, "outputs": outputs})
    return cells


def differences(stored: Any, fresh: Any) -> list[str]:
    """Human-readable differences between two notebooks' comparable parts (empty if they match)."""
    old, new = comparable(stored), comparable(fresh)
    if len(old) != len(new):
        return [f"{len(old)} cells stored, {len(new)} in the fresh run"]
    out = []
    for number, (a, b) in enumerate(zip(old, new, strict=True), start=1):
        if a != b:
            diff = difflib.unified_diff(
                json.dumps(a, indent=1, sort_keys=True).splitlines(),
                json.dumps(b, indent=1, sort_keys=True).splitlines(),
                "stored",
                "fresh",
                lineterm="",
                n=1,
            )
            out.append(f"cell {number}:\n" + "\n".join(list(diff)[:40]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="notebook names or paths (default: all in notebooks/)")
    parser.add_argument("--check", action="store_true", help="compare with a fresh run instead of storing it")
    args = parser.parse_args(argv)
    stale = 0
    for path in notebook_paths(args.notebooks):
        fresh = execute(path)
        if args.check:
            found = differences(nbformat.read(path, as_version=4), fresh)
            stale += bool(found)
            print(f"{path.name}: {'outputs differ' if found else 'up to date'}")
            for text in found:
                print(text)
        else:
            nbformat.write(fresh, path)
            print(f"{path.name}: executed and stored")
    if stale:
        print("run `python notebooks/regenerate.py` and commit the notebooks", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
