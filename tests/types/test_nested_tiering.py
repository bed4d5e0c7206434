"""Tiering nested columns: Iceberg list/map/struct with their own field ids (kept when a column is added), vectors
stored as lists whose field doc records the length and read back as fixed-length arrays; lake and union reads equal
the live table after updates and deletes."""

from __future__ import annotations

import polars as pl
import pytest
from pyiceberg.types import ListType, MapType, NestedField, StructType

import fluss_lake as fl
import tiering
from tiering.compaction import compact_table
from tiering.reads import read_history, read_lake, union_read

SCHEMA = {"id": "INT", "tags": "ARRAY<STRING>", "attrs": "MAP<STRING, ARRAY<DOUBLE>>",
          "addr": "ROW<zip INT NOT NULL, lines ARRAY<STRING>>", "emb": pl.Array(pl.Float32, 3),
          "items": "ARRAY<ROW<sku STRING, qty INT>>"}


def rows(ids: range, scale: float) -> list[dict]:
    return [{"id": i, "tags": [f"t{i}"] * (i % 3), "attrs": {"k": [scale * i]} if i % 2 else None,
             "addr": {"zip": i, "lines": ["a", "b"][: i % 3]}, "emb": [scale * i, 1.0, -scale],
             "items": None if i % 3 == 0 else [{"sku": f"s{i}", "qty": i}] * (i % 3 - 1)} for i in ids]


@pytest.fixture
def live(tmp_path) -> tuple[fl.Connection, fl.Table, tiering.Lake]:
    conn = fl.connect(str(tmp_path / "store"))
    conn.create_database("d")
    conn.create_table("d.t", schema=SCHEMA, primary_key=["id"], bucket_num=2,
                      options={"table.datalake.enabled": True})
    return conn, conn.get_table("d.t"), tiering.Lake.for_connection(conn)


def _ids(field: NestedField) -> list[int]:
    """Field ids of `field` and everything nested in it."""
    kind, ids = field.field_type, [field.field_id]
    if isinstance(kind, ListType):
        ids += _ids(kind.element_field)
    elif isinstance(kind, MapType):
        ids += _ids(kind.key_field) + _ids(kind.value_field)
    elif isinstance(kind, StructType):
        ids += [i for f in kind.fields for i in _ids(f)]
    return ids


def test_nested_rows_tier_and_read_back_equal_to_live_with_stable_field_ids(live) -> None:
    conn, table, lake = live
    table.upsert(rows(range(6), 1.0))
    table.upsert(rows(range(2, 4), 2.0))  # updates
    table.delete([{"id": 5}])
    tiering.tier_once(conn, lake)

    iceberg = lake.load("d.t")
    schema = iceberg.schema()
    assert isinstance(schema.find_field("attrs").field_type, MapType)
    assert isinstance(schema.find_field("addr").field_type, StructType)
    assert isinstance(schema.find_field("emb").field_type, ListType)
    assert schema.find_field("emb").doc == "fluss.vector.dimension=3"
    ids = [i for f in schema.fields for i in _ids(f)]
    assert len(ids) == len(set(ids))  # every element, key, value and field has its own id

    expected = table.to_polars().sort("id")
    assert expected.filter(pl.col("items").is_null()).height and expected.filter(pl.col("items").list.len() == 0).height
    lake_rows = read_lake(lake, "d.t").collect().select(expected.columns).sort("id")
    assert lake_rows.schema == expected.schema  # the vector is a fixed-length Array again
    assert lake_rows.to_dicts() == expected.to_dicts()

    table.upsert(rows(range(5, 8), 3.0))  # a live tail after the lake
    table.delete([{"id": 0}])
    union = union_read(table, lake).collect().sort("id")
    assert union.to_dicts() == table.to_polars().sort("id").to_dicts()

    conn.alter_table("d.t", add_columns={"extra": "MAP<STRING, ROW<a ARRAY<INT>>>"})
    table = conn.get_table("d.t")
    table.upsert([{**rows(range(9, 10), 1.0)[0], "extra": {"x": {"a": [1, 2]}}}])
    tiering.tier_once(conn, lake)
    evolved = lake.load("d.t").schema()
    assert [i for f in evolved.fields if f.name in SCHEMA for i in _ids(f)] == [
        i for f in schema.fields if f.name in SCHEMA for i in _ids(f)]  # existing ids kept
    all_ids = [i for f in evolved.fields for i in _ids(f)]
    assert len(all_ids) == len(set(all_ids))
    assert [f.name for f in evolved.fields][-4:] == ["extra", "__bucket", "__offset", "__timestamp"]
    again = read_lake(lake, "d.t").collect().select(table.schema.names).sort("id")
    assert again.to_dicts() == table.to_polars().sort("id").to_dicts()

    assert compact_table(table, lake, force=True).committed  # rewrites files through pyiceberg's reader and writer
    compacted = read_lake(lake, "d.t").collect().select(table.schema.names).sort("id")
    assert compacted.to_dicts() == table.to_polars().sort("id").to_dicts()


def test_history_carries_nested_before_and_after_images(live) -> None:
    conn, table, lake = live
    table.upsert(rows(range(1, 2), 1.0))
    table.upsert(rows(range(1, 2), 5.0))
    tiering.tier_once(conn, lake)
    history = read_history(lake, "d.t").sort("__offset").collect()
    assert history["__change_type"].to_list() == ["+I", "-U", "+U"]
    assert history["emb"].to_list() == [[1.0, 1.0, -1.0], [1.0, 1.0, -1.0], [5.0, 1.0, -5.0]]
    assert history.schema["emb"] == pl.Array(pl.Float32, 3)
    assert history["attrs"].to_list() == [{"k": [1.0]}, {"k": [1.0]}, {"k": [5.0]}]


def test_a_log_table_with_a_vector_tiers_and_reads_back(tmp_path) -> None:
    conn = fl.connect(str(tmp_path / "store"))
    conn.create_database("d")
    conn.create_table("d.events", schema={"k": "STRING", "emb": pl.Array(pl.Float64, 2), "r": "ROW<v ARRAY<INT>>"},
                      options={"table.datalake.enabled": True})
    events = conn.get_table("d.events")
    events.append([{"k": "a", "emb": [1.0, 2.0], "r": {"v": [1]}}, {"k": "b", "emb": None, "r": None}])
    lake = tiering.Lake.for_connection(conn)
    tiering.tier_once(conn, lake)
    back = read_lake(lake, "d.events").collect().select("k", "emb", "r").sort("k")
    assert back.schema["emb"] == pl.Array(pl.Float64, 2)
    assert back.to_dicts() == events.to_polars().sort("k").to_dicts()


def test_null_lists_and_maps_of_rows_stay_null_through_pyiceberg_writes_and_reads(tmp_path) -> None:
    """pyiceberg 0.12 alone writes these nulls as empty lists/maps (apache/iceberg-python#3833)."""
    import pyarrow as pa

    lake = tiering.Lake.local(tmp_path / "lake")
    lake.catalog.create_namespace("d")
    entry = pa.struct([("a", pa.int32())])
    data = pa.table({"l": pa.array([None, [{"a": 1}], []], pa.list_(entry)),
                     "m": pa.array([[("k", {"a": 2})], None, []], pa.map_(pa.string(), entry))})
    table = lake.catalog.create_table(("d", "t"), schema=data.schema)
    table.append(data)
    back = table.scan().to_arrow()  # pyiceberg's own reader, through the same projection
    assert back.column("l").to_pylist() == [None, [{"a": 1}], []]
    assert back.column("m").to_pylist() == [[("k", {"a": 2})], None, []]
