"""Training sets and states pinned to lake snapshots by id or time (``lake=``, ``snapshot_ids=``, ``snapshot_as_of=``,
``snapshot_id=``): the same rows after more writes and tiering rounds, equal to what the table held when the snapshot
was tiered; a partitioned table too; bad pins refused before anything is read, the lake unchanged."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import duckdb
import polars as pl
import pytest
from tiering_helpers import LAKE_ON

import fluss_lake as fl
from fluss_lake.exceptions import InvalidConfigError, LakeSnapshotNotFoundError
from fluss_lake.training import FeatureView, register_training_set, state_as_of, training_set
from tiering import lake_snapshots, read_history, tier_once


def _views(customers: fl.Table, spend: fl.Table) -> list[FeatureView]:
    return [FeatureView.from_table(customers, prefix="c__"), FeatureView.from_table(spend, prefix="s__")]


@pytest.fixture
def shop(local):
    """Two primary-key tables, tiered once (`first`: what they held then), then changed, tiered and changed again."""
    conn, lake = local
    conn.create_table("d.customers", schema={"id": "INT", "tier": "STRING"}, primary_key=["id"], bucket_num=2,
                      options=LAKE_ON)
    conn.create_table("d.spend", schema={"id": "INT", "total": "DOUBLE"}, primary_key=["id"], bucket_num=3,
                      options=LAKE_ON)
    customers, spend = conn.get_table("d.customers"), conn.get_table("d.spend")
    customers.upsert([{"id": i, "tier": f"t{i % 3}"} for i in range(12)])
    spend.upsert([{"id": i, "total": float(i)} for i in range(0, 12, 2)])
    tier_once(conn, lake)
    entities = pl.DataFrame({"id": list(range(-1, 13)), "prediction_ts": [datetime.now(UTC)] * 14},
                            schema={"id": pl.Int32, "prediction_ts": pl.Datetime("us", "UTC")})
    first = {
        "train": training_set(entities, _views(customers, spend)),
        "customers": customers.to_polars().sort("id"),
        "ids": {p: lake_snapshots(lake, p, kind="history")["snapshot_id"][-1] for p in ("d.customers", "d.spend")},
        "tiered_at": max(lake_snapshots(lake, p, kind="history")["committed_at"][-1]
                         for p in ("d.customers", "d.spend")),
    }
    time.sleep(0.01)  # later commits, strictly
    customers.upsert([{"id": 3, "tier": "gold"}, {"id": 40, "tier": "new"}])
    customers.delete([{"id": 5}])
    spend.upsert([{"id": 2, "total": -1.0}, {"id": 3, "total": 33.0}])
    tier_once(conn, lake)
    customers.upsert([{"id": 7, "tier": "live-only"}])  # a live tail after the second round
    return conn, lake, customers, spend, entities, first


def test_a_training_set_pinned_by_ids_or_time_gives_the_rows_of_its_snapshot_after_more_rounds(shop) -> None:
    conn, lake, customers, spend, entities, first = shop
    entities = entities.with_columns(prediction_ts=pl.lit(datetime.now(UTC)))  # after every write
    current = training_set(entities, _views(customers, spend))
    assert not current.equals(first["train"].with_columns(prediction_ts=entities["prediction_ts"]))
    by_ids = training_set(entities, _views(customers, spend), lake=lake, snapshot_ids=first["ids"])
    # the pinned set holds the values as tiered in the first snapshots, whatever came after
    assert by_ids.drop("prediction_ts").equals(first["train"].drop("prediction_ts"))
    by_time = training_set(entities, _views(customers, spend), lake=lake, snapshot_as_of=first["tiered_at"])
    assert by_time.equals(by_ids)
    by_string = training_set(entities, _views(customers, spend), lake=lake,
                             snapshot_as_of=first["tiered_at"].isoformat())
    assert by_string.equals(by_ids)
    # the same as the pinned frames read by hand, and as DuckDB's view of it
    by_hand = training_set(entities, [
        FeatureView(read_history(lake, "d.customers", snapshot_id=first["ids"]["d.customers"]), keys=["id"],
                    prefix="c__"),
        FeatureView(read_history(lake, "d.spend", snapshot_id=first["ids"]["d.spend"]), keys=["id"], prefix="s__"),
    ])
    assert by_hand.equals(by_ids)
    con = duckdb.connect()
    assert register_training_set(con, "train", entities, _views(customers, spend), lake=lake,
                                 snapshot_ids=first["ids"]).equals(by_ids)
    assert con.sql("SELECT count(*) FROM train WHERE c__tier IS NOT NULL").fetchall() == [(12,)]
    # more rounds do not move it
    spend.upsert([{"id": 0, "total": 100.0}])
    tier_once(conn, lake)
    again = training_set(entities, _views(customers, spend), lake=lake, snapshot_ids=first["ids"], key_chunks=2)
    assert again.equals(by_ids)


def test_a_state_pinned_to_a_snapshot_is_the_table_as_tiered_then(shop) -> None:
    conn, lake, customers, spend, entities, first = shop
    pinned = state_as_of(customers, lake=lake, snapshot_id=first["ids"]["d.customers"]).collect()
    assert pinned.equals(first["customers"])
    assert state_as_of(customers, lake=lake, snapshot_as_of=first["tiered_at"]).collect().equals(pinned)
    # lake= a Lake without a pin: its current snapshot plus the live tail, i.e. the current state
    assert state_as_of(customers, lake=lake).collect().equals(customers.to_polars().sort("id"))
    assert state_as_of(customers, lake=lake).collect().equals(
        state_as_of(customers, lake=read_history(lake, "d.customers")).collect())
    # a later snapshot gives the state as of that round, without the live tail written after it
    second = lake_snapshots(lake, "d.customers", kind="history")["snapshot_id"][-1]
    at_second = state_as_of(customers, lake=lake, snapshot_id=second).collect()
    assert at_second.filter(pl.col("id") == 7)["tier"].to_list() == ["t1"]
    assert customers.lookup([{"id": 7}])["tier"].to_list() == ["live-only"]
    assert 5 not in at_second["id"].to_list() and 40 in at_second["id"].to_list()


def test_a_partitioned_table_pins_too(local) -> None:
    conn, lake = local
    conn.create_table("d.balance", schema={"region": "STRING", "id": "INT", "amount": "DOUBLE"},
                      primary_key=["region", "id"], partition_keys=["region"], bucket_num=2, options=LAKE_ON)
    balance = conn.get_table("d.balance")
    balance.upsert([{"region": r, "id": i, "amount": float(i)} for r in ("eu", "us") for i in range(4)])
    tier_once(conn, lake)
    then = balance.to_polars().sort("region", "id")
    first = lake_snapshots(lake, "d.balance", kind="history")["snapshot_id"][-1]
    balance.upsert([{"region": "eu", "id": 1, "amount": 99.0}, {"region": "apac", "id": 1, "amount": 1.0}])
    tier_once(conn, lake)
    pinned = state_as_of(balance, lake=lake, snapshot_id=first).collect()
    assert pinned.sort("region", "id").equals(then)
    entities = pl.DataFrame({"region": ["eu", "apac"], "id": [1, 1], "prediction_ts": [datetime.now(UTC)] * 2},
                            schema={"region": pl.String, "id": pl.Int32, "prediction_ts": pl.Datetime("us", "UTC")})
    out = training_set(entities, FeatureView.from_table(balance), lake=lake, snapshot_ids={"d.balance": first})
    assert out["amount"].to_list() == [1.0, None]


def test_bad_pins_are_refused_before_anything_is_read(shop) -> None:
    conn, lake, customers, spend, entities, first = shop
    views = _views(customers, spend)
    snapshots = {p: lake_snapshots(lake, p, kind="history") for p in ("d.customers", "d.spend")}
    cases = [
        (dict(snapshot_ids=first["ids"]), InvalidConfigError, "need lake="),
        (dict(lake=lake), InvalidConfigError, "lake= goes with snapshot_ids= or snapshot_as_of="),
        (dict(lake=lake, snapshot_ids=first["ids"], snapshot_as_of=first["tiered_at"]), InvalidConfigError,
         "not both"),
        (dict(lake=lake, snapshot_ids={"d.customers": first["ids"]["d.customers"]}), InvalidConfigError,
         r"name exactly the views' tables \['d.customers', 'd.spend'\]"),
        (dict(lake=lake, snapshot_ids={**first["ids"], "d.other": 1}), InvalidConfigError, "name exactly"),
        (dict(lake=lake, snapshot_ids={**first["ids"], "d.spend": 12345}), LakeSnapshotNotFoundError,
         "has no snapshot 12345"),
        (dict(lake=lake, snapshot_ids={**first["ids"], "d.spend": "1"}), InvalidConfigError, "snapshot_ids"),
        (dict(lake=lake, snapshot_ids=[1, 2]), InvalidConfigError, "must map table paths"),
        (dict(lake=lake, snapshot_as_of="2000-01-01T00:00:00+00:00"), LakeSnapshotNotFoundError,
         "no snapshot committed at or before"),
        (dict(lake=lake, snapshot_as_of="yesterday"), InvalidConfigError, "not an ISO date"),
        (dict(lake=read_history(lake, "d.customers"), snapshot_ids=first["ids"]), InvalidConfigError,
         "need lake=<a tiering.Lake>"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            training_set(entities, views, **kwargs)
    unbound = FeatureView(read_history(lake, "d.spend"), keys=["id"], name="raw spend")
    with pytest.raises(InvalidConfigError, match="'raw spend' has no live table"):
        training_set(entities, unbound, lake=lake, snapshot_as_of=first["tiered_at"])
    with pytest.raises(InvalidConfigError, match="pass the live Table and lake="):
        state_as_of(read_history(lake, "d.customers"), primary_key=["id"], snapshot_id=first["ids"]["d.customers"])
    with pytest.raises(InvalidConfigError, match="pass the live Table and lake="):
        state_as_of(customers, lake=read_history(lake, "d.customers"), snapshot_id=first["ids"]["d.customers"])
    with pytest.raises(InvalidConfigError, match="not both"):
        state_as_of(customers, lake=lake, snapshot_id=first["ids"]["d.customers"], snapshot_as_of=first["tiered_at"])
    with pytest.raises(LakeSnapshotNotFoundError):
        state_as_of(customers, lake=lake, snapshot_id=first["ids"]["d.spend"])  # another table's snapshot
    for path, before in snapshots.items():  # nothing was committed or changed
        assert lake_snapshots(lake, path, kind="history").equals(before)
