"""The client has the verbs of a local Table: the same answers, the same writes, the same errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import fluss_lake as fl
from fluss_lake.training import FeatureView, online_features, served_features, training_set


def test_reads_equal_the_local_table(conn, remote):
    local, served = conn.get_table("shop.customer"), remote.get_table("shop.customer")
    assert served.schema == local.schema and served.is_primary_key_table and served.bucket_num == 2
    keys = [{"id": 3}, {"id": 9}, {"id": 1}]
    assert_frame_equal(served.lookup(keys, with_found=True, with_offsets=True),
                       local.lookup(keys, with_found=True, with_offsets=True))
    assert served.lookup(keys)["tier"].to_list() == ["bronze", None, "gold"]
    orders_local, orders = conn.get_table("shop.orders"), remote.get_table("shop.orders")
    assert_frame_equal(orders.prefix_lookup([{"customer_id": 2}, {"customer_id": 7}]),
                       orders_local.prefix_lookup([{"customer_id": 2}, {"customer_id": 7}]))
    assert served.end_offsets() == local.end_offsets() and served.earliest_offsets() == local.earliest_offsets()
    start = {0: 1, 1: 0}
    assert_frame_equal(served.changelog(start_offsets=start, with_bucket=True),
                       local.changelog(start_offsets=start, with_bucket=True))
    assert_frame_equal(served.scan_log(change_types=["+I"]), local.scan_log(change_types=["+I"]))
    assert_frame_equal(served.to_polars().sort("id"), local.to_polars().sort("id"))
    assert served.limit_scan(2, columns=["id"]).height == 2
    assert remote.list_databases() == ["audit", "other", "shop"]
    assert remote.list_tables("shop") == ["customer", "orders", "payments"]


def test_writes_land_in_the_store(conn, remote):
    payments = remote.get_table("shop.payments")
    result = payments.append([{"payment_id": 1, "customer_id": 1, "amount": 12.5}])
    assert result.rows == 1 and sum(e - b for b, e in result.offsets.values()) == 1
    assert conn.get_table("shop.payments").scan_log()["amount"].to_list() == [12.5]
    customer = remote.get_table("shop.customer")
    customer.upsert(pl.DataFrame({"id": [4], "tier": ["gold"], "score": [0.7]}))
    customer.upsert([{"id": 1, "score": 0.95}], target_columns=["id", "score"])  # partial update
    customer.delete([{"id": 2}])
    rows = conn.get_table("shop.customer").to_polars().sort("id")
    assert rows.rows() == [(1, "gold", 0.95), (3, "bronze", 0.1), (4, "gold", 0.7)]


def test_errors_are_the_library_errors_and_lose_nothing(conn, remote):
    local, served = conn.get_table("shop.customer"), remote.get_table("shop.customer")
    before = local.end_offsets()
    for call in (lambda t: t.upsert([{"id": 5, "tier": "x"}]),  # missing column
                 lambda t: t.upsert([{"id": None, "tier": "x", "score": 1.0}]),  # null primary key
                 lambda t: t.upsert([{"tier": "x"}], target_columns=["tier"]),  # targets without the key
                 lambda t: t.lookup([{"nope": 1}])):
        with pytest.raises(fl.FlussLakeError) as local_error:
            call(local)
        with pytest.raises(fl.FlussLakeError) as remote_error:
            call(served)
        assert type(remote_error.value) is type(local_error.value)
        assert str(remote_error.value) == str(local_error.value)
    assert local.end_offsets() == before
    with pytest.raises(fl.TableNotExistError, match="shop.nope"):
        remote.get_table("shop.nope")
    with pytest.raises(fl.UnsupportedOperationError):
        remote.get_table("shop.payments").lookup([{"payment_id": 1}])


def test_online_features_served_equal_embedded_and_are_logged(conn, remote, clock):
    views_local = [FeatureView.from_table(conn.get_table("shop.customer"), entity_keys=["customer_id"],
                                          ttl="500 ms", prefix="c__"),
                   FeatureView.from_table(conn.get_table("shop.customer"), entity_keys=["customer_id"],
                                          features=["tier"], prefix="all__")]
    customer = remote.get_table("shop.customer")
    views_remote = [FeatureView.from_table(customer, entity_keys=["customer_id"], ttl="500 ms", prefix="c__"),
                    FeatureView.from_table(customer, entity_keys=["customer_id"], features=["tier"], prefix="all__")]
    entities = pl.DataFrame({"customer_id": [1, 2, 3, 9, None], "amount": [5.0, 6.0, 7.0, 8.0, 9.0]})
    now = datetime(2026, 1, 1, 0, 0, 1, 200_000, tzinfo=UTC)  # 1.2 s after the first write, 0.2 s after the second
    embedded = online_features(entities, views_local, now=now, with_status=True)
    served = online_features(entities, views_remote, now=now, with_status=True, log="audit.served",
                             request_id="req-1")
    assert_frame_equal(served.frame, embedded.frame)
    assert served.frame["c__tier"].to_list() == [None, "gold", "bronze", None, None]  # 1 is older than the TTL
    assert served.status[0].to_list() == ["OUTSIDE_MAX_AGE", "PRESENT", "PRESENT", "NOT_FOUND", "NOT_FOUND"]
    assert [s.to_list() for s in served.value_times] == [s.to_list() for s in embedded.value_times]
    assert served.request_id == "req-1"
    # the log holds exactly what was served, and training at served_ts over the same views reproduces it
    logged = served_features(conn.get_table("audit.served"), request_ids=["req-1"])
    assert logged["customer_id"].to_list() == [1, 2, 3, 9, None]
    assert logged["c__tier"].to_list() == served.frame["c__tier"].to_list()
    assert logged["served_ts"].unique().to_list() == [now]
    again = training_set(logged.select("customer_id", pl.col("served_ts").alias("prediction_ts")), views_local)
    assert again["c__tier"].to_list() == logged["c__tier"].to_list()
    assert again["all__tier"].to_list() == logged["all__tier"].to_list()


def test_training_over_a_served_store(conn, remote):
    """FeatureView.from_table(remote table) is a training view too: its history comes through changelog reads."""
    view = FeatureView.from_table(remote.get_table("shop.customer"), prefix="c__")
    local = FeatureView.from_table(conn.get_table("shop.customer"), prefix="c__")
    entities = pl.DataFrame({"id": [1, 2, 2], "prediction_ts": [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(milliseconds=d)
                                                               for d in (0, 500, 1000)]})
    assert_frame_equal(training_set(entities, view), training_set(entities, local))
    assert training_set(entities, view)["c__tier"].to_list() == ["gold", "silver", "gold"]
