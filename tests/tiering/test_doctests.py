"""The docstring examples of the ``tiering`` package run as tests (pytest's --doctest-modules covers only
``fluss_lake``; these examples are part of the public documentation too)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["tiering.changes", "tiering.committer", "tiering.compaction", "tiering.lake", "tiering.lake_snapshot",
           "tiering.orphans", "tiering.reads", "tiering.state_index",
           "tiering.schema", "tiering.service"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
