"""Shared fixtures: a local store folder, a moto S3 server on 127.0.0.1, fresh buckets, changelog replay.

S3 in tests is always moto's *server* (``ThreadedMotoServer``) on 127.0.0.1, never the in-process mock: the
code under test talks HTTP through s3fs/aiobotocore, and child processes reach the same server.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# Credentials/region for botocore (also inherited by child processes); never the real AWS.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log

REGION = "us-east-1"


def s3_storage_options(endpoint: str, *, connect_timeout: float = 3, read_timeout: float = 10,
                       max_attempts: int = 2, call_timeout: float = 60) -> dict[str, Any]:
    """fsspec/s3fs options for a moto endpoint; short timeouts and few retries so a dead endpoint fails fast.

    ``max_attempts`` counts botocore attempts per s3fs call (first try included); ``call_timeout`` is
    fluss-lake's deadline for one whole storage call (s3fs's own retries included).
    """
    return {
        "call_timeout": call_timeout,
        "endpoint_url": endpoint,
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"region_name": REGION},
        "config_kwargs": {
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "retries": {"total_max_attempts": max_attempts, "mode": "standard"},
        },
    }


def start_moto_server(port: int = 0) -> tuple[Any, str]:
    """A moto S3 server on 127.0.0.1 (port 0: the OS picks one, no race); returns (server, endpoint).

    moto keeps its buckets in process-wide backends, so a server restarted on the same port serves the same data.
    """
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def create_bucket(endpoint: str) -> str:
    """Create a uniquely named bucket on `endpoint`; returns its name."""
    import boto3

    name = f"lake-{uuid.uuid4().hex[:16]}"
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=name)
    return name


@pytest.fixture
def tmp_store(tmp_path) -> str:
    """A local folder for ``fluss_lake.connect`` (not created yet: connecting creates it)."""
    return str(tmp_path / "lake")


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """One moto S3 server for the whole session: its ``http://127.0.0.1:PORT`` endpoint."""
    server, endpoint = start_moto_server()
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture
def s3_url(moto_endpoint) -> tuple[str, dict[str, Any]]:
    """A fresh bucket on the session's moto server: ``(url, storage_options)`` for ``fluss_lake.connect``."""
    bucket = create_bucket(moto_endpoint)
    return f"s3://{bucket}/lake", s3_storage_options(moto_endpoint)


@pytest.fixture
def moto_server_factory() -> Iterator[Callable[..., tuple[Any, str]]]:
    """Start dedicated moto servers (e.g. to stop one mid-test; ``port=`` restarts one); all stopped at teardown."""
    servers: list[Any] = []

    def start(port: int = 0) -> tuple[Any, str]:
        server, endpoint = start_moto_server(port)
        servers.append(server)
        return server, endpoint

    yield start
    for server in servers:
        try:
            server.stop()
        except Exception:  # noqa: BLE001 - already stopped by the test
            pass


@pytest.fixture
def s3_bucket_factory() -> Callable[[str], str]:
    """``create(endpoint) -> bucket name``: a fresh bucket on any moto endpoint."""
    return create_bucket


@pytest.fixture
def s3_options_factory() -> Callable[..., dict[str, Any]]:
    """``options(endpoint, connect_timeout=, read_timeout=, max_attempts=)``: storage options for any endpoint."""
    return s3_storage_options


def replay_changelog(table: Any) -> Any:
    """A primary-key table's state rebuilt only from its changelog (last after-image per key, deletes drop).

    Returns a polars DataFrame with the table's columns, sorted by primary key.
    """
    import polars as pl

    pk = list(table.schema.primary_key)
    log = table.changelog(with_bucket=True)
    images = log.filter(pl.col("_change_type") != "update_before").sort("_bucket", "_log_offset")
    last = images.unique(subset=pk, keep="last", maintain_order=True)
    return last.filter(pl.col("_change_type") != "delete").select(table.schema.names).sort(pk)


@pytest.fixture
def changelog_replay() -> Callable[[Any], Any]:
    """:func:`replay_changelog` as a fixture."""
    return replay_changelog
