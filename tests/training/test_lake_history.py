"""Training sets from the lake on moto S3: primary-key tables (one partitioned) written at controlled clock
times, tiered into Iceberg (pyiceberg SqlCatalog on sqlite, warehouse on a moto bucket, PyArrowFileIO), then
training sets and states as of a time built from the lake's history table + the live tail.

They must equal the same computed from the complete live log alone, never leak a value committed after the
prediction time, and stay complete after ``table.log.ttl`` removed the live log (where the live log alone no
longer can answer), and after a partition was dropped live (the lake keeps its history).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

import fluss_lake as fl
import tiering
from fluss_lake.exceptions import IncompleteHistoryError
from fluss_lake.training import FeatureView, history_of, state_as_of, training_set

pytestmark = pytest.mark.s3
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms
LAKE_ON = {"table.datalake.enabled": True, "table.log.ttl": "1 d"}


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp((T0 + ms) / 1000, tz=UTC)


@pytest.fixture
def shop(s3_url, moto_endpoint, tmp_path):
    """Live store and lake on one moto bucket; clock in ms after T0 (a list to move it)."""
    url, options = s3_url
    clock = [T0]
    conn = fl.connect(url, storage_options=options, clock=lambda: clock[0], local_dir=str(tmp_path / "state"))
    conn.create_database("shop")
    bucket = url.split("/")[2]
    lake = tiering.Lake({"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                         "warehouse": f"s3://{bucket}/warehouse", "s3.endpoint": moto_endpoint,
                         "s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1",
                         "s3.connect-timeout": "10", "s3.request-timeout": "30"})  # PyArrowFileIO (the default)
    return conn, lake, clock


def _write_history(conn: fl.Connection, lake: tiering.Lake, clock: list[int]) -> None:
    """Inserts, updates and deletes at controlled times, tiered twice, with a live tail after the last round."""
    conn.create_table("shop.customer", schema={"id": "BIGINT", "tier": "STRING", "score": "DOUBLE"},
                      primary_key=["id"], bucket_num=2, options=LAKE_ON)
    conn.create_table("shop.balance", schema={"region": "STRING", "id": "BIGINT", "amount": "DOUBLE"},
                      primary_key=["region", "id"], partition_keys=["region"], bucket_num=2, options=LAKE_ON)
    customer, balance = conn.get_table("shop.customer"), conn.get_table("shop.balance")
    steps = [
        (0, lambda: customer.upsert([{"id": i, "tier": "bronze", "score": float(i)} for i in range(1, 5)])),
        (0, lambda: balance.upsert([{"region": "eu", "id": i, "amount": 10.0 * i} for i in range(1, 4)])),
        (10, lambda: customer.upsert([{"id": 1, "tier": "silver", "score": 1.5}])),
        (10, lambda: balance.upsert([{"region": "us", "id": 1, "amount": 5.0}])),   # a new partition
        (20, lambda: customer.delete([{"id": 2}])),
        (20, lambda: balance.upsert([{"region": "eu", "id": 1, "amount": 11.0}])),
        ("tier", None),
        (30, lambda: customer.upsert([{"id": 2, "tier": "gold", "score": 2.0}, {"id": 3, "tier": "gold", "score": 3.5}])),
        (30, lambda: balance.delete([{"region": "eu", "id": 2}])),
        (40, lambda: balance.upsert([{"region": "apac", "id": 7, "amount": 1.0}, {"region": "us", "id": 1, "amount": 6.0}])),
        ("tier", None),
        (50, lambda: customer.upsert([{"id": 1, "tier": "gold", "score": 9.0}])),    # live tail only
        (50, lambda: balance.upsert([{"region": "eu", "id": 3, "amount": 0.0}])),
    ]
    for at, step in steps:
        if at == "tier":
            clock[0] += 1
            assert all(r.committed for r in tiering.tier_once(conn, lake))
        else:
            clock[0] = T0 + at
            step()


def _entities(keys: pl.DataFrame) -> pl.DataFrame:
    """Every key at every interesting time: before, at and after each write (in ms after T0)."""
    times = [_ts(t) + timedelta(microseconds=d) for t in (0, 10, 20, 30, 40, 50) for d in (-1, 0, 1)]
    return keys.join(pl.DataFrame({"prediction_ts": times}), how="cross")


def _no_leakage(frame: pl.DataFrame, history: pl.DataFrame, keys: list[str], feature: str, prefix: str) -> None:
    """Each returned value was committed for that key at or before the prediction time."""
    values = history.filter(pl.col("__change_type").is_in(["+I", "+U"])).select(*keys, feature, "__timestamp")
    got = frame.filter(pl.col(prefix + feature).is_not_null())
    assert got.height > 0
    matched = got.join(values, left_on=[*keys, prefix + feature], right_on=[*keys, feature], how="left") \
        .filter(pl.col("__timestamp") <= pl.col("prediction_ts"))
    assert matched.select(*keys, "prediction_ts").unique().height == got.select(*keys, "prediction_ts").unique().height


def test_training_sets_and_states_from_the_lake_on_s3_equal_the_live_log(shop):
    conn, lake, clock = shop
    _write_history(conn, lake, clock)
    customer, balance = conn.get_table("shop.customer"), conn.get_table("shop.balance")
    # the lake history really is partial: the last writes are only live
    lake_customer = tiering.read_history(lake, customer.path).collect()  # read from S3 once
    lake_balance = tiering.read_history(lake, balance.path).collect()
    live_history = {customer.path: history_of(customer).collect(), balance.path: history_of(balance).collect()}
    assert 0 < lake_customer.height < live_history[customer.path].height
    assert set(lake_balance["__partition"].to_list()) == {"eu", "us", "apac"}
    assert lake_balance.height < live_history[balance.path].height

    customers = _entities(pl.DataFrame({"id": [1, 2, 3, 4, 5]}))
    balances = _entities(pl.DataFrame({"region": ["eu", "eu", "eu", "us", "apac", "apac"], "id": [1, 2, 3, 1, 7, 1]}))
    views = {
        "lake": (FeatureView.from_table(customer, lake=lake_customer, prefix="c__"),
                 FeatureView.from_table(balance, lake=lake_balance, prefix="b__")),
        "live": (FeatureView.from_table(customer, prefix="c__"), FeatureView.from_table(balance, prefix="b__")),
    }
    built = {name: (training_set(customers, c).lazy().collect(), training_set(balances, b).lazy().collect())
             for name, (c, b) in views.items()}
    assert built["lake"][0].equals(built["live"][0])
    assert built["lake"][1].equals(built["live"][1])
    # the values change over time (the test would catch a frozen or shifted history)
    assert built["lake"][0].filter(pl.col("id") == 1)["c__tier"].unique().sort(nulls_last=True).to_list() == ["bronze", "gold", "silver", None]
    assert built["lake"][1].filter((pl.col("region") == "eu") & (pl.col("id") == 2))["b__amount"].null_count() > 0
    # no leakage: every value was committed at or before its prediction time
    _no_leakage(built["lake"][0], live_history[customer.path], ["id"], "tier", "c__")
    _no_leakage(built["lake"][1], live_history[balance.path], ["region", "id"], "amount", "b__")
    # just before the tail write the lake-backed set still sees the old value, at it the new one
    row = built["lake"][0].filter(pl.col("id") == 1).sort("prediction_ts")
    assert row.filter(pl.col("prediction_ts") == _ts(50) - timedelta(microseconds=1))["c__tier"].item() == "silver"
    assert row.filter(pl.col("prediction_ts") == _ts(50))["c__tier"].item() == "gold"

    for table, lake_history in ((customer, lake_customer), (balance, lake_balance)):
        pk = list(table.schema.primary_key)
        combined = history_of(table, lake=lake_history).collect()  # what state_as_of(table, lake=...) reads
        for t in (0, 10, 19, 20, 35, 40, 50):
            from_lake = state_as_of(combined, primary_key=pk, timestamp=_ts(t)).collect()
            assert from_lake.equals(state_as_of(live_history[table.path], primary_key=pk, timestamp=_ts(t)).collect())
        assert state_as_of(table, lake=lake_history, timestamp=_ts(35)).collect().equals(
            state_as_of(live_history[table.path], primary_key=pk, timestamp=_ts(35)).collect())
        assert state_as_of(table, lake=lake_history).collect().equals(table.to_polars().sort(pk))
    assert state_as_of(balance, lake=lake_balance, offsets=balance.end_offsets()).collect().height == \
        balance.to_polars().height


def test_the_lake_keeps_training_sets_complete_after_ttl_and_partition_drops(shop):
    conn, lake, clock = shop
    _write_history(conn, lake, clock)
    customer, balance = conn.get_table("shop.customer"), conn.get_table("shop.balance")
    customers = _entities(pl.DataFrame({"id": [1, 2, 3]}))
    balances = _entities(pl.DataFrame({"region": ["eu", "us", "apac"], "id": [1, 1, 7]}))
    reference_c = training_set(customers, FeatureView.from_table(customer)).lazy().collect()
    reference_b = training_set(balances, FeatureView.from_table(balance)).lazy().collect()
    reference_state = state_as_of(balance, timestamp=_ts(45)).collect()

    tiering.tier_once(conn, lake)          # tier the tail, then let table.log.ttl remove the live log
    clock[0] = T0 + 3 * 86_400_000
    customer.upsert([{"id": 3, "tier": "platinum", "score": 0.0}])   # the newest batch is always kept
    balance.upsert([{"region": "eu", "id": 1, "amount": 12.0}])
    customer.expire_log()
    balance.expire_log()
    assert any(o > 0 for o in customer.earliest_offsets().values())
    with pytest.raises(IncompleteHistoryError):
        history_of(customer)
    view_c = FeatureView.from_table(customer, lake=tiering.read_history(lake, customer.path))
    view_b = FeatureView.from_table(balance, lake=tiering.read_history(lake, balance.path))
    assert training_set(customers, view_c).lazy().collect().equals(reference_c)
    assert training_set(balances, view_b).lazy().collect().equals(reference_b)

    balance.drop_partition("us")   # no delete records: the lake keeps the partition's history
    tiering.tier_once(conn, lake)
    view_b = FeatureView.from_table(balance, lake=tiering.read_history(lake, balance.path))
    assert training_set(balances, view_b).lazy().collect().equals(reference_b)
    assert state_as_of(balance, lake=tiering.read_history(lake, balance.path), timestamp=_ts(45)).collect() \
        .equals(reference_state)
