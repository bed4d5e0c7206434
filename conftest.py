"""Root pytest configuration for the doctests of the packages (``testpaths`` lists ``fluss_lake``, ``tiering``
and ``assets``; ``--doctest-modules`` imports every module of them to collect its examples).

Nothing is excluded from collection: every module imports without side effects (no files, threads or
servers at import). ``tiering/__main__.py`` (the only module that would act when imported as a script) is
skipped by pytest itself, which never collects ``__main__.py``; ``assets/cli.py`` only builds argparse parsers.
Add a path to ``collect_ignore`` (relative to this folder) for a module that must not be imported, with why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

collect_ignore: list[str] = []

_ASSETS = Path(__file__).parent / "assets"


@pytest.fixture(autouse=True)
def _assets_doctests_without_dagster_home(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``assets.ui.prepare_home``'s example follows ``$DAGSTER_HOME``: unset, it writes into its own temporary
    folder, never into a developer's Dagster instance (and an existing ``dagster.yaml`` there cannot fail it)."""
    if isinstance(request.node, pytest.DoctestItem) and request.node.path.is_relative_to(_ASSETS):
        monkeypatch.delenv("DAGSTER_HOME", raising=False)
