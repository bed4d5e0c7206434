"""Equality check of our training sets against Feast's offline point-in-time join (where Feast is installed).

Feast is not a fluss-lake dependency, so this is not in ``python -m bench``; run it in an environment with
``feast`` installed: ``python -m bench.training_feast``. Feast has no deletes, so the history has none; both
modes are compared on the same data (1-day TTL): commit time (Feast ``timestamp_field`` = our commit time) and
event time (Feast ``timestamp_field`` = the rows' event time, ``created_timestamp_column`` = commit time).
Feast leaves out entity rows it finds nothing for; they count as nulls. Prints one JSON line per mode.
"""

from __future__ import annotations

import json
import os
import tempfile
import textwrap
import time
from datetime import timedelta

import numpy as np
import polars as pl

from bench.training import make_entities, make_history
from fluss_lake.training import FeatureView, training_set


def main() -> None:
    from feast import Entity, FeatureStore, Field, FileSource
    from feast import FeatureView as FeastView
    from feast.types import Float64, Int32

    hist = make_history(60_000, 2_000, seed=11, p_delete=0.0)
    lag = np.random.default_rng(4).integers(0, 3 * 86_400_000_000, hist.height)
    hist = hist.with_columns((pl.col("__timestamp") - pl.duration(microseconds=pl.Series(lag))).alias("ev"))
    entities = make_entities(5_000, 2_000, seed=12)
    with tempfile.TemporaryDirectory() as work:
        source_path = os.path.join(work, "a.parquet")
        hist.filter(pl.col("__change_type") != "-U").select(
            "entity_id", "x", "n", pl.col("__timestamp").alias("commit_ts"), pl.col("__timestamp").alias("created"),
            "ev").write_parquet(source_path)
        repo = os.path.join(work, "repo")
        os.makedirs(repo)
        with open(os.path.join(repo, "feature_store.yaml"), "w") as handle:
            handle.write(textwrap.dedent(f"""\
                project: cmp
                registry: {work}/registry.db
                provider: local
                online_store:
                    type: sqlite
                    path: {work}/online.db
                offline_store:
                    type: file
                entity_key_serialization_version: 3
                """))
        store = FeatureStore(repo_path=repo)
        entity = Entity(name="entity", join_keys=["entity_id"])
        entity_df = entities.with_row_index("row_id").select(
            "row_id", "entity_id", pl.col("prediction_ts").alias("event_timestamp")).to_pandas()
        for mode, ts_field in (("commit time", "commit_ts"), ("event time", "ev")):
            name = "a_commit" if mode == "commit time" else "a_event"
            source = FileSource(path=source_path, timestamp_field=ts_field, created_timestamp_column="created")
            view = FeastView(name=name, entities=[entity], ttl=timedelta(days=1), source=source,
                             schema=[Field(name="x", dtype=Float64), Field(name="n", dtype=Int32)])
            store.apply([entity, view])
            start = time.perf_counter()
            theirs = pl.from_pandas(store.get_historical_features(
                entity_df=entity_df, features=[f"{name}:x", f"{name}:n"]).to_df())
            feast_s = time.perf_counter() - start
            start = time.perf_counter()
            ours = training_set(entities, FeatureView(hist, keys=["entity_id"], features=["x", "n"],
                                                      ttl=timedelta(days=1),
                                                      event_time="ev" if mode == "event time" else None))
            ours_s = time.perf_counter() - start
            both = ours.with_row_index("row_id").join(
                theirs.select("row_id", pl.col("x").alias("fx"), pl.col("n").cast(pl.Int64).alias("fn")),
                on="row_id", how="left")
            differing = both.filter(~pl.col("x").eq_missing(pl.col("fx"))
                                    | ~pl.col("n").cast(pl.Int64).eq_missing(pl.col("fn"))).height
            print(json.dumps({"check": "training vs feast", "mode": mode, "entity_rows": ours.height,
                              "with_value": int(ours["x"].is_not_null().sum()), "differing": differing,
                              "feast_s": round(feast_s, 3), "ours_s": round(ours_s, 4)}), flush=True)


if __name__ == "__main__":
    main()
