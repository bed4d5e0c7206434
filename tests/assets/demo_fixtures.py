"""Fixtures for the Dagster layer: resources on a temporary local home or on a moto S3 bucket, and a
snapshot of every demo table (to prove a rejected materialization changed nothing).

Imported by the test modules that use them: a second ``conftest.py`` would clash with ``tests/conftest.py``
under ``--doctest-modules`` (both import as the module ``conftest``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

# A small scenario keeps every materialization in the tens of milliseconds.
SMALL = {"customers": 300, "new_customers_per_batch": 5, "orders_per_batch": 120}


@pytest.fixture
def home(tmp_path, monkeypatch) -> Any:
    """An empty FLUSS_LAKE_HOME (and no FLUSS_LAKE_URL / catalog overrides from the environment)."""
    for name in ("FLUSS_LAKE_URL", "FLUSS_LAKE_STORAGE_OPTIONS", "FLUSS_LAKE_CATALOG_URI", "FLUSS_LAKE_WAREHOUSE",
                 "FLUSS_LAKE_CATALOG_PROPERTIES", "DAGSTER_HOME"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "home"
    monkeypatch.setenv("FLUSS_LAKE_HOME", str(path))
    return path


@pytest.fixture
def local_resources(home) -> dict[str, Any]:
    """The code location's resources on the embedded default (under `home`), with a small scenario."""
    from assets.cluster import RayCluster
    from assets.resources import DemoScenario, LakeCatalog, LiveStore

    return {"live": LiveStore(), "lake": LakeCatalog(), "demo": DemoScenario(**SMALL), "ray": RayCluster()}


@pytest.fixture
def s3_resources(s3_url, tmp_path) -> dict[str, Any]:
    """Resources whose live store is a fresh moto S3 bucket."""
    from assets.cluster import RayCluster
    from assets.resources import DemoScenario, LakeCatalog, LiveStore

    url, options = s3_url
    endpoint, bucket = options["endpoint_url"], url[len("s3://"):].split("/")[0]
    # the lake on the same bucket through pyiceberg's PyArrowFileIO with every s3.* key (STACK-NOTES §3); the
    # sqlite catalog file is local (a SQL catalog needs one), the warehouse is on S3
    properties = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO", "s3.endpoint": endpoint,
                  "s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1",
                  "s3.connect-timeout": "5", "s3.request-timeout": "30"}
    lake = LakeCatalog(uri=f"sqlite:///{tmp_path / 'lake-catalog.db'}", warehouse=f"s3://{bucket}/warehouse",
                       properties=json.dumps(properties))
    return {"live": LiveStore(url=url, storage_options=json.dumps(options)), "lake": lake,
            "demo": DemoScenario(**SMALL), "ray": RayCluster()}


def table_states(connection: Any) -> dict[str, Any]:
    """Every demo table's rows (sorted) and log end offsets, for before/after comparisons."""
    from assets.tables import DEMO_TABLES

    states = {}
    for spec in DEMO_TABLES.values():
        if not connection.table_exists(spec.path):
            states[spec.name] = None
            continue
        table = connection.get_table(spec.path)
        rows = table.to_polars().sort(next(iter(spec.schema)))
        states[spec.name] = (rows, table.end_offsets())
    return states


def assert_same_states(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Tables, rows and end offsets are exactly as before."""
    assert before.keys() == after.keys()
    for name, state in before.items():
        if state is None:
            assert after[name] is None, name
            continue
        assert after[name][0].equals(state[0]), name
        assert after[name][1] == state[1], name


@pytest.fixture
def snapshot_tables() -> Callable[[Any], dict[str, Any]]:
    """``snapshot(connection)`` -> comparable state of every demo table."""
    return table_states


@pytest.fixture
def same_states() -> Callable[[dict[str, Any], dict[str, Any]], None]:
    """``check(before, after)``: assert nothing changed."""
    return assert_same_states
