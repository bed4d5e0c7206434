"""An embedding feature (a fixed-length float vector) joined point-in-time into a training set: values and length
intact, from the live history and from the lake's history."""

from __future__ import annotations

import time

import polars as pl
import pytest

import fluss_lake as fl
import tiering
from fluss_lake.training import FeatureView, history_of, training_set
from tiering.reads import read_history


def test_an_embedding_feature_joins_point_in_time_with_its_length(tmp_path) -> None:
    conn = fl.connect(str(tmp_path / "store"))
    conn.create_database("d")
    conn.create_table("d.users", schema={"id": "BIGINT", "emb": pl.Array(pl.Float32, 4), "seg": "STRING"},
                      primary_key=["id"], options={"table.datalake.enabled": True})
    users = conn.get_table("d.users")
    users.upsert([{"id": 1, "emb": [0.0, 0.5, 1.0, 1.5], "seg": "a"}, {"id": 2, "emb": [2.0, 2.0, 2.0, 2.0],
                                                                        "seg": "b"}])
    lake = tiering.Lake.for_connection(conn)
    tiering.tier_once(conn, lake)  # the first version is in the lake
    first = read_history(lake, "d.users").collect()["__timestamp"].max()
    time.sleep(0.01)  # the update commits strictly later than the first write
    users.upsert([{"id": 1, "emb": [9.0, 8.0, 7.0, 6.0], "seg": "a"}])  # live only
    second = history_of(users).collect()["__timestamp"].max()
    assert second > first

    entities = pl.DataFrame({"id": [1, 1, 2], "prediction_ts": [first, second, second]},
                            schema={"id": pl.Int64, "prediction_ts": pl.Datetime("us", "UTC")})
    history = history_of(users, lake=read_history(lake, "d.users"))
    out = training_set(entities, FeatureView(history, keys=["id"], features=["emb"]))
    assert out.schema["emb"] == pl.Array(pl.Float32, 4)
    assert out.sort("prediction_ts", "id")["emb"].to_list() == [
        [0.0, 0.5, 1.0, 1.5], [9.0, 8.0, 7.0, 6.0], [2.0, 2.0, 2.0, 2.0]]


def test_a_vector_declared_by_type_string_keeps_its_length_in_the_lake_and_refuses_other_lengths(tmp_path) -> None:
    conn = fl.connect(str(tmp_path / "store"))
    conn.create_database("d")
    conn.create_table("d.items", schema={"id": "BIGINT", "emb": "ARRAY<FLOAT NOT NULL>(3) NOT NULL"},
                      primary_key=["id"], options={"table.datalake.enabled": True})
    items = conn.get_table("d.items")
    assert items.schema.column("emb").type_name == "ARRAY<FLOAT NOT NULL>(3)"
    assert items.schema.column("emb").vector_dimension == 3 and not items.schema.column("emb").nullable
    items.upsert([{"id": 1, "emb": [1.0, 2.0, 3.0]}])
    before = items.to_polars()
    for bad in ([1.0, 2.0], [1.0, 2.0, 3.0, 4.0], [1.0, None, 3.0], None):
        with pytest.raises(fl.SchemaMismatchError):
            items.upsert([{"id": 2, "emb": bad}])
        assert items.to_polars().equals(before) and items.end_offsets() == {0: 1}
    lake = tiering.Lake.for_connection(conn)
    tiering.tier_once(conn, lake)
    field = lake.catalog.load_table("d.items").schema().find_field("emb")
    assert field.doc == "fluss.vector.dimension=3"  # the length travels in the lake schema
    back = read_history(lake, "d.items").collect()
    assert back.schema["emb"] == pl.Array(pl.Float32, 3) and back["emb"].to_list() == [[1.0, 2.0, 3.0]]
