"""Batched primary-key lookups and prefix lookups, checked against the table's state read in full."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fluss_lake as fl


@pytest.fixture
def conn(tmp_path) -> fl.Connection:
    connection = fl.connect(tmp_path)
    connection.create_database("d")
    return connection


def test_batched_lookup_across_buckets_keeps_key_order(conn) -> None:
    conn.create_table("d.u", schema={"id": "BIGINT", "name": "STRING"}, primary_key=["id"], bucket_num=5)
    table = conn.get_table("d.u")
    table.upsert(pl.DataFrame({"id": np.arange(1000), "name": [f"n{i}" for i in range(1000)]}))
    probe = [7, 2000, 999, 7, 0, -1]
    out = table.new_lookup().lookup(pl.DataFrame({"id": probe}), with_found=True)
    assert out.get_column("id").to_list() == probe
    assert out.get_column("name").to_list() == ["n7", None, "n999", "n7", "n0", None]
    assert out.get_column("_found").to_list() == [True, False, True, True, True, False]


def test_lookup_sees_writes_of_another_connection(conn, tmp_path) -> None:
    conn.create_table("d.u", schema={"id": "INT", "v": "INT"}, primary_key=["id"])
    reader = conn.get_table("d.u")
    assert reader.lookup([{"id": 1}]).get_column("v").to_list() == [None]
    writer = fl.connect(tmp_path).get_table("d.u")  # another connection: its own tablets, like another process
    writer.upsert([{"id": 1, "v": 10}])
    assert reader.lookup([{"id": 1}]).get_column("v").to_list() == [10]
    writer.delete([{"id": 1}])
    assert reader.new_lookup().lookup([{"id": 1}], with_found=True).get_column("_found").to_list() == [False]


def test_lookup_rejects_non_key_columns_and_null_keys(conn) -> None:
    conn.create_table("d.u", schema={"id": "INT", "v": "INT"}, primary_key=["id"])
    table = conn.get_table("d.u")
    with pytest.raises(fl.InvalidConfigError, match="may only hold"):
        table.lookup([{"id": 1, "v": 2}])
    with pytest.raises(fl.NullPrimaryKeyError):
        table.lookup([{"id": None}])


def test_composite_key_lookup(conn) -> None:
    conn.create_table("d.c", schema={"a": "INT", "b": "STRING", "v": "DOUBLE"}, primary_key=["a", "b"], bucket_num=3)
    table = conn.get_table("d.c")
    table.upsert([{"a": 1, "b": "x", "v": 1.0}, {"a": 1, "b": "y", "v": 2.0}, {"a": 2, "b": "x", "v": 3.0}])
    out = table.lookup([{"a": 1, "b": "y"}, {"a": 2, "b": "y"}, {"a": 2, "b": "x"}])
    assert out.get_column("v").to_list() == [2.0, None, 3.0]


def _prefix_table(conn: fl.Connection, name: str) -> fl.Table:
    conn.create_table(f"d.{name}", schema={"customer": "BIGINT", "order_id": "STRING", "amount": "INT"},
                      primary_key=["customer", "order_id"], bucket_keys=["customer"], bucket_num=3)
    return conn.get_table(f"d.{name}")


def test_prefix_lookup_needs_a_strict_leading_prefix(conn) -> None:
    conn.create_table("d.full", schema={"a": "INT", "b": "INT"}, primary_key=["a", "b"])
    with pytest.raises(fl.UnsupportedOperationError, match="prefix"):
        conn.get_table("d.full").prefix_lookup([{"a": 1}])
    table = _prefix_table(conn, "p")
    with pytest.raises(fl.InvalidConfigError):
        table.new_prefix_lookup(["order_id"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 8), st.sampled_from(["o1", "o2", "o3", "o4"]), st.integers(0, 99)),
                min_size=1, max_size=40),
       st.lists(st.integers(-1, 9), min_size=1, max_size=6))
def test_prefix_lookup_equals_filtering_the_state(tmp_path_factory, ops, probes) -> None:
    conn = fl.connect(tmp_path_factory.mktemp("p"))
    conn.create_database("d")
    table = _prefix_table(conn, "p")
    for is_delete, customer, order, amount in ops:
        if is_delete:
            table.delete([{"customer": customer, "order_id": order}])
        else:
            table.upsert([{"customer": customer, "order_id": order, "amount": amount}])
    state = table.to_polars()
    got = table.prefix_lookup(pl.DataFrame({"customer": probes}))
    for index, customer in enumerate(probes):
        mine = got.filter(pl.col("_key_index") == index).drop("_key_index").sort("order_id")
        want = state.filter(pl.col("customer") == customer).sort("order_id")
        assert mine.equals(want)


def test_iceberg_format_tables_bucket_like_iceberg(tmp_path) -> None:
    import pyarrow as pa

    from fluss_lake.keys.bucketing import assign_buckets

    conn = fl.connect(tmp_path, datalake_format="iceberg")
    conn.create_database("d")
    info = conn.create_table("d.i", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"], bucket_num=8)
    assert info.options["table.datalake.format"] == "iceberg"
    table = conn.get_table("d.i")
    ids = np.arange(200)
    result = table.upsert(pl.DataFrame({"id": ids, "v": ["x"] * 200}))
    expected = assign_buckets([pa.array(ids)], 8, lake_format="iceberg")
    counts = np.bincount(expected, minlength=8)
    assert {b: end - start for b, (start, end) in result.offsets.items()} == {b: int(c) for b, c in enumerate(counts) if c}
    assert table.lookup(pl.DataFrame({"id": [5, 150]})).get_column("v").to_list() == ["x", "x"]
