"""Fixtures for tiering: a live store with the embedded lake beside it, and the same on moto S3.

The lake is a real pyiceberg SqlCatalog on sqlite; on S3 its warehouse is a bucket of the session's moto server
(``ThreadedMotoServer`` on 127.0.0.1) read and written through pyiceberg's FsspecFileIO.
"""

from __future__ import annotations

import pytest
from tiering_helpers import lake_properties

import fluss_lake as fl
from tiering import Lake


@pytest.fixture
def local(tmp_store, tmp_path) -> tuple[fl.Connection, Lake]:
    """A local live store and the embedded lake beside it."""
    conn = fl.connect(tmp_store, local_dir=str(tmp_path / "state"))
    conn.create_database("d")
    return conn, Lake.for_connection(conn)


@pytest.fixture
def on_s3(s3_url, moto_endpoint, tmp_path) -> tuple[fl.Connection, Lake]:
    """A live store on a fresh moto bucket and a lake whose warehouse is on the same bucket."""
    url, options = s3_url
    conn = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "state"))
    conn.create_database("d")
    bucket = url.split("/")[2]
    return conn, Lake(lake_properties(moto_endpoint, bucket, str(tmp_path / "catalog.db")))


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store_and_lake(request) -> tuple[fl.Connection, Lake]:
    """Both setups: the local default and moto S3."""
    return request.getfixturevalue("local" if request.param == "local" else "on_s3")
