"""Fixtures of the integrity tests: the pristine stores (built once per test process, lazily), a fresh copy of one
per case, and the integrity warnings a read logged. The builders, objects, damages and read paths are in
``integrity_helpers`` (a plain module, so the child processes of the "reopen" tests share them)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from integrity_helpers import BUILDERS, INTEGRITY_LOGGER


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``pristine(name)``: the folder of store `name` (``log``, ``pk``, ``parted``), built on first use. Tests never
    open it: they copy it (:func:`copy_store`)."""
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            root = tmp_path_factory.mktemp(f"pristine-{name}") / "store"
            BUILDERS[name](root)
            built[name] = root
        return built[name]

    return get


@pytest.fixture
def copy_store(tmp_path: Path) -> Callable[[Path, str], Path]:
    """``copy_store(source, name)``: a copy of a store folder under this test's folder."""

    def copy(source: Path, name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(source, target)
        return target

    return copy


@pytest.fixture
def integrity_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """``integrity_log()``: the messages logged on ``fluss_lake.integrity`` so far in this test."""
    caplog.set_level(logging.WARNING, logger=INTEGRITY_LOGGER)

    def messages() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == INTEGRITY_LOGGER]

    return messages
