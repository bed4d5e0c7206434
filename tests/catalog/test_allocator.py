"""Allocator settings applied when fluss_lake is imported before pyarrow (each case in a fresh interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VAR = "MIMALLOC_ARENA_EAGER_COMMIT"


def _fresh(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != VAR}
    clean["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    return out.stdout.strip()


SHOW = f"import os; print(os.environ.get({VAR!r}, 'unset'))"


def test_arenas_are_committed_on_demand_when_fluss_lake_loads_pyarrow() -> None:
    assert _fresh(f"import fluss_lake, pyarrow; {SHOW}") == "0"
    assert _fresh(f"from fluss_lake.jobs import DeltaJoin; {SHOW}") == "0"  # any entry point imports the package


@pytest.mark.parametrize("value", ["1", "2"])
def test_a_value_the_user_set_is_kept(value: str) -> None:
    assert _fresh(f"import fluss_lake; {SHOW}", **{VAR: value}) == value


def test_nothing_is_set_when_pyarrow_loaded_first() -> None:
    """mimalloc has read its options by then: setting the variable would only mislead."""
    assert _fresh(f"import pyarrow as pa; pa.array([1]); import fluss_lake; {SHOW}") == "unset"
