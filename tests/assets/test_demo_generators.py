"""The demo generators: deterministic per batch, realistic shapes, each stream owning only its columns."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from assets import generators as gen
from assets.tables import DEMO_TABLES, STREAM_COLUMNS
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.metadata.types import to_polars_dtype

S = gen.Scenario(customers=500, new_customers_per_batch=10, orders_per_batch=400)


def _declared(table: str, columns: tuple[str, ...] | None = None) -> dict[str, pl.DataType]:
    schema = DEMO_TABLES[table].schema
    return {name: to_polars_dtype(schema[name]) for name in (columns or schema)}


@pytest.mark.parametrize("make", [gen.customers, gen.orders, gen.payments,
                                  *(lambda s, b, n=n: gen.stream(s, n, b) for n in gen.STREAMS)])
def test_a_batch_is_the_same_frame_every_time_and_batches_differ(make):
    assert make(S, 3).equals(make(S, 3))
    assert not make(S, 3).equals(make(S, 4))
    assert not make(S, 3).equals(make(gen.Scenario(seed=8, customers=500, new_customers_per_batch=10,
                                                   orders_per_batch=400), 3))


def test_frames_have_the_declared_columns_and_types():
    assert dict(gen.customers(S, 0).schema) == _declared("customers")
    assert dict(gen.orders(S, 0).schema) == _declared("orders")
    assert dict(gen.payments(S, 0).schema) == _declared("payments")
    for name, columns in STREAM_COLUMNS.items():
        assert dict(gen.stream(S, name, 2).schema) == _declared("customer_360", ("customer_id", *columns))


def test_streams_partition_the_customer_360_columns():
    owned = [c for columns in STREAM_COLUMNS.values() for c in columns]
    assert len(owned) == len(set(owned))
    # every column but the key and `updated_at` (which every stream writes: its batch's window end) has one owner
    shared = {"customer_id", "updated_at"}
    assert sorted(owned) == sorted(c for c in DEMO_TABLES["customer_360"].schema if c not in shared)


def test_customers_grow_by_batch_and_restate_fixed_attributes():
    first = gen.customers(S, 0)
    assert first["customer_id"].to_list() == list(range(500))
    later = gen.customers(S, 4)
    new = later.filter(pl.col("customer_id") >= S.customers_at(3))
    assert new["customer_id"].to_list() == list(range(S.customers_at(3), S.customers_at(4)))
    changed = later.filter(pl.col("customer_id") < S.customers_at(3))
    assert 0 < changed.height <= S.customers_at(3) // 100
    # a customer's name, email, country and signup time are the same in every batch that mentions it
    both = changed.join(first, on="customer_id", suffix="_0")
    for column in ("name", "email", "country", "signup_at"):
        assert both[column].equals(both[f"{column}_0"], check_names=False)
    start, end = S.window(4)
    assert new["signup_at"].dt.epoch("ms").is_between(start, end - 1).all()


def test_orders_place_then_ship_within_the_batch_window():
    frame = gen.orders(S, 2)
    placed = frame.filter(pl.col("status") == "placed")
    shipped = frame.filter(pl.col("status") == "shipped")
    assert placed.height == 400 and placed["order_id"].is_unique().all()
    assert set(shipped["order_id"]) <= set(placed["order_id"]) and 0.3 < shipped.height / 400 < 0.5
    assert placed["order_id"].min() == 2 * gen.ORDER_ID_STRIDE
    start, end = S.window(2)
    assert placed["created_at"].dt.epoch("ms").is_between(start, end - 1).all()
    assert placed["customer_id"].max() < S.customers_at(2)
    # older customers order more often (popularity skew), amounts are positive and right-skewed
    ids = placed["customer_id"].to_numpy()
    assert (ids < S.customers_at(2) // 2).mean() > 0.6
    assert placed["amount"].min() > 0 and placed["amount"].mean() > placed["amount"].median()


def test_payments_match_orders_and_fraud_follows_its_signals():
    frames = [gen.payments(S, b) for b in range(25)]
    pays = pl.concat(frames)
    orders = pl.concat([gen.orders(S, b).filter(pl.col("status") == "placed") for b in range(25)])
    assert pays["payment_id"].to_list() == pays["order_id"].to_list()
    joined = pays.join(orders, on="order_id")
    assert joined.height == pays.height and (joined["amount"] == joined["amount_right"]).all()
    assert (joined["paid_at"] > joined["created_at"]).all()
    # a batch covers its event window: a payment of batch b is paid before batch b + 1 starts
    for b, frame in enumerate(frames):
        assert frame["paid_at"].dt.epoch("ms").max() < S.window(b)[1], b
    rate = pays["is_fraud"].mean()
    assert 0.005 < rate < 0.05
    mismatch = pays.filter(pl.col("ip_country") != pl.col("card_country"))["is_fraud"].mean()
    match = pays.filter(pl.col("ip_country") == pl.col("card_country"))["is_fraud"].mean()
    assert mismatch > 2 * match


def test_stream_activity_is_a_subset_of_existing_customers():
    for name in gen.STREAMS:
        frame = gen.stream(S, name, 1)
        assert frame["customer_id"].is_unique().all()
        assert frame["customer_id"].max() < S.customers_at(1)
        assert frame.height > 0


def test_bad_scenarios_and_batches_are_rejected_with_what_to_do():
    with pytest.raises(InvalidConfigError, match="orders_per_batch"):
        gen.Scenario(orders_per_batch=0)
    with pytest.raises(InvalidConfigError, match="timezone-aware"):
        from datetime import datetime
        gen.Scenario(epoch=datetime(2026, 1, 1))
    with pytest.raises(InvalidConfigError, match="non-negative"):
        gen.orders(S, -1)
    with pytest.raises(InvalidConfigError, match="unknown stream"):
        gen.stream(S, "clicks", 0)


def test_generation_is_vectorized_enough_for_large_batches():
    big = gen.Scenario(customers=200_000, orders_per_batch=200_000)
    frame = gen.payments(big, 0)
    assert frame.height == 200_000 and np.unique(frame["payment_id"].to_numpy()).size == 200_000
