"""`fl.connect()` without a URL opens the home's store, the one `fluss-lake ui`, `materialize` and `tier` use."""

from __future__ import annotations

import logging
import os

import fluss_lake as fl
from fluss_lake import connection
from fluss_lake.connection import default_store_url


def test_the_default_store_is_the_homes(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLUSS_LAKE_URL", raising=False)
    monkeypatch.delenv("FLUSS_LAKE_HOME", raising=False)
    assert default_store_url() == os.path.join(".fluss-lake", "live")
    conn = fl.connect()
    conn.create_database("d")
    assert (tmp_path / ".fluss-lake" / "live" / "d").is_dir()
    monkeypatch.setenv("FLUSS_LAKE_HOME", str(tmp_path / "elsewhere"))
    assert default_store_url() == str(tmp_path / "elsewhere" / "live")
    monkeypatch.setenv("FLUSS_LAKE_URL", "s3://bucket/store")
    assert default_store_url() == "s3://bucket/store"  # a named store wins


def test_an_earlier_default_store_is_still_found_and_said(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLUSS_LAKE_URL", raising=False)
    monkeypatch.delenv("FLUSS_LAKE_HOME", raising=False)
    fl.connect(str(tmp_path / "fluss-lake-data")).create_database("old")  # what the previous version's default made
    monkeypatch.setattr(connection, "_said_legacy", [])  # said once per process: as if none was said yet
    with caplog.at_level(logging.WARNING, logger="fluss_lake"):
        assert fl.connect().list_databases() == ["old"]
        assert fl.connect().list_databases() == ["old"]
    said = [r.getMessage() for r in caplog.records if "fluss-lake-data" in r.getMessage()]
    assert len(said) == 1 and "move it" in said[0]
    assert not (tmp_path / ".fluss-lake").exists()  # nothing created beside it
