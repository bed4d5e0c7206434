"""On moto S3: a primary-key table stored on S3, and any history frame (here Parquet objects on the same S3
server; the engine only sees a LazyFrame of the history shape) joined with the live tail. The Iceberg history
tables written by tiering are tested in test_lake_history.py."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.training import FeatureView, history_of, state_as_of, training_set

pytestmark = pytest.mark.s3
T0 = 1_767_225_600_000


def test_training_set_over_a_lake_frame_on_s3_plus_the_live_tail(s3_url, moto_endpoint):
    url, options = s3_url
    clock = [T0]
    conn = fl.connect(url, storage_options=options, clock=lambda: clock[0])
    conn.create_database("shop")
    conn.create_table("shop.customer", schema={"id": "BIGINT", "tier": "STRING"}, primary_key=["id"], bucket_num=2)
    customer = conn.get_table("shop.customer")
    customer.upsert([{"id": 1, "tier": "bronze"}, {"id": 2, "tier": "bronze"}])
    lake_part = history_of(customer).collect()  # "tiered" so far
    parquet_options = {"aws_endpoint_url": moto_endpoint, "aws_access_key_id": "testing",
                       "aws_secret_access_key": "testing", "aws_region": "us-east-1", "aws_allow_http": "true"}
    target = f"{url.rsplit('/', 1)[0]}/history/customer.parquet"
    lake_part.write_parquet(target, storage_options=parquet_options)
    clock[0] = T0 + 10
    customer.upsert([{"id": 1, "tier": "gold"}])
    clock[0] = T0 + 20
    customer.delete([{"id": 2}])
    lake = pl.scan_parquet(target, storage_options=parquet_options)
    view = FeatureView.from_table(customer, lake=lake, prefix="c__")
    at = [datetime.fromtimestamp((T0 + t) / 1000, tz=UTC) for t in (0, 9, 10, 20)]
    entities = pl.DataFrame({"id": [1, 1, 1, 2, 2, 2], "prediction_ts": [at[0], at[1], at[2], at[1], at[3], at[2]]})
    assert training_set(entities, view)["c__tier"].to_list() == ["bronze", "bronze", "gold", "bronze", None, "bronze"]
    full = history_of(customer, lake=lake).collect()
    assert full.sort("__bucket", "__offset").equals(history_of(customer).collect().sort("__bucket", "__offset"))
    assert state_as_of(customer, lake=lake, timestamp=at[2]).collect().to_dicts() == [
        {"id": 1, "tier": "gold"}, {"id": 2, "tier": "bronze"}]
