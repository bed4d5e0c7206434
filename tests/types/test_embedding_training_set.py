"""An embedding feature (a fixed-length float vector) joined point-in-time into a training set: values and length
intact, from the live history and from the lake's history."""

from __future__ import annotations

import time

import polars as pl

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
