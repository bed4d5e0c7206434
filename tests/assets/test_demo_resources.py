# ruff: noqa: F811 - pytest fixtures imported from demo_fixtures are redefined as test arguments
"""Resources: the embedded default under FLUSS_LAKE_HOME, S3 and the catalog by configuration, clear errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from demo_fixtures import home  # noqa: F401 - fixtures

from assets.resources import DemoScenario, LakeCatalog, LiveStore
from fluss_lake.exceptions import InvalidConfigError


def test_live_store_defaults_to_a_folder_under_the_home(home):
    store = LiveStore()
    assert store.resolved_url() == str(home / "live")
    connection = store.connection()
    connection.create_database("d")
    assert (home / "live" / "d" / "_database.json").exists()
    assert store.connection() is connection


def test_live_store_url_from_the_environment_and_from_the_resource(home, tmp_path, monkeypatch):
    monkeypatch.setenv("FLUSS_LAKE_URL", str(tmp_path / "env-store"))
    assert LiveStore().resolved_url() == str(tmp_path / "env-store")
    assert LiveStore(url=str(tmp_path / "explicit")).resolved_url() == str(tmp_path / "explicit")


@pytest.mark.s3
def test_live_store_on_s3_by_configuration(s3_url, home):
    url, options = s3_url
    connection = LiveStore(url=url, storage_options=json.dumps(options)).connection()
    connection.create_database("d")
    assert connection.url.startswith("s3://") and connection.list_databases() == ["d"]
    assert not (home / "live").exists()


@pytest.mark.parametrize("text, message", [("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object")])
def test_bad_storage_options_are_a_clear_error(home, text, message):
    with pytest.raises(InvalidConfigError, match=message):
        LiveStore(storage_options=text).connection()
    with pytest.raises(InvalidConfigError, match=message):
        LakeCatalog(properties=text).catalog()
    assert not home.exists()


def test_lake_catalog_defaults_to_sqlite_and_a_warehouse_beside_the_store(home):
    props = LakeCatalog().resolved_properties()
    assert props["uri"] == f"sqlite:///{home / 'lake' / 'catalog.db'}"
    assert props["warehouse"] == (home / "lake" / "warehouse").as_uri()
    catalog = LakeCatalog().catalog()
    catalog.create_namespace("c360")
    table = catalog.create_table("c360.probe", schema=pa.schema([pa.field("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert catalog.load_table("c360.probe").scan().to_arrow().num_rows == 2
    assert (home / "lake" / "catalog.db").exists() and any((home / "lake" / "warehouse").rglob("*.parquet"))


@pytest.mark.s3
def test_lake_catalog_with_an_s3_warehouse_by_properties(moto_endpoint, s3_bucket_factory, home):
    bucket = s3_bucket_factory(moto_endpoint)
    props = {"s3.endpoint": moto_endpoint, "s3.access-key-id": "testing", "s3.secret-access-key": "testing",
             "s3.region": "us-east-1", "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}
    lake = LakeCatalog(warehouse=f"s3://{bucket}/warehouse", properties=json.dumps(props))
    catalog = lake.catalog()
    catalog.create_namespace("c360")
    table = catalog.create_table("c360.probe", schema=pa.schema([pa.field("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([7], pa.int64())}))
    assert table.metadata_location.startswith(f"s3://{bucket}/warehouse/")
    assert catalog.load_table("c360.probe").scan().to_arrow()["id"].to_pylist() == [7]


def test_demo_scenario_resource_builds_the_generators_scenario():
    scenario = DemoScenario(seed=3, customers=10, batch_window_minutes=30).scenario()
    assert (scenario.seed, scenario.customers, scenario.batch_window_ms) == (3, 10, 1_800_000)
    with pytest.raises(InvalidConfigError, match="ISO timestamp"):
        DemoScenario(epoch="yesterday").scenario()
    with pytest.raises(InvalidConfigError, match="customers"):
        DemoScenario(customers=0).scenario()


def test_a_rest_catalog_gets_only_what_was_configured(home, monkeypatch):
    monkeypatch.setenv("FLUSS_LAKE_CATALOG_PROPERTIES", '{"type": "rest", "uri": "http://127.0.0.1:8181"}')
    assert LakeCatalog().resolved_properties() == {"type": "rest", "uri": "http://127.0.0.1:8181"}
    assert LakeCatalog(warehouse="s3://b/w").resolved_properties()["warehouse"] == "s3://b/w"
