"""State snapshots: a fresh Connection restores the latest snapshot, replays the tail, and gets the same state.

A seeded random workload (upserts, updates, deletes, re-inserts, several keys per batch and repeats of a key
inside one batch) runs against a default-engine primary-key table while a plain dict models the expected
state. The restore must equal the model and the changelog replay, must really start from a snapshot (not a
full replay), and must not change the store.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import polars as pl
import pytest

import fluss_lake as fl


def _workload(table, rng: random.Random, batches: int, keys: int) -> dict[int, tuple[str, int]]:
    model: dict[int, tuple[str, int]] = {}
    for n in range(batches):
        writer = table.new_upsert()
        for _ in range(rng.randint(1, 12)):
            k = rng.randrange(keys)
            if model.get(k) and rng.random() < 0.25:
                writer.delete([{"id": k}])
                model.pop(k)
            else:
                row = (f"b{n}-{rng.randrange(1000)}", rng.randrange(10**6))
                writer.upsert([{"id": k, "name": row[0], "score": row[1]}])
                model[k] = row
        writer.flush()
    return model


def _frame(model: dict[int, tuple[str, int]], schema: pl.Schema) -> pl.DataFrame:
    ids = sorted(model)
    return pl.DataFrame({"id": ids, "name": [model[i][0] for i in ids], "score": [model[i][1] for i in ids]},
                        schema=schema)


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_restore_from_snapshot_plus_tail_local(tmp_store, tmp_path, changelog_replay):
    conn = fl.connect(tmp_store, local_dir=str(tmp_path / "writer"), snapshot_every=8)
    conn.create_database("d")
    conn.create_table("d.users", schema={"id": "INT", "name": "STRING", "score": "BIGINT"}, primary_key=["id"],
                      bucket_num=3)
    table = conn.get_table("d.users")
    model = _workload(table, random.Random(7), batches=120, keys=60)
    expected = _frame(model, table.schema.polars_schema)
    state = table.to_polars().sort("id")
    assert state.equals(expected), "the writer's own state differs from the model"

    # snapshots were taken and older ones collected; each manifest names segments that exist
    data_dir = next(p for p in (Path(tmp_store) / "d" / "users").iterdir() if p.name.startswith("data-"))
    for b in range(3):
        manifests = sorted((data_dir / "kv" / f"b{b:05d}" / "snapshots").glob("*.json"))
        assert 1 <= len(manifests) <= 2, f"bucket {b}: {len(manifests)} snapshot manifests retained"
    ends = table.end_offsets()
    before = _files(Path(tmp_store))

    fresh = fl.connect(tmp_store, local_dir=str(tmp_path / "reader"))
    restored_table = fresh.get_table("d.users")
    restored = restored_table.to_polars().sort("id")
    assert restored.equals(expected)
    assert restored.equals(changelog_replay(restored_table))
    for b in range(3):
        tablet = restored_table._tablets().kv_tablet(b)
        assert 0 < tablet.last_snapshot <= ends[b], f"bucket {b} did not restore from a snapshot"
        assert tablet.applied == ends[b]
    assert any(restored_table._tablets().kv_tablet(b).last_snapshot < ends[b] for b in range(3)), "no tail was replayed"
    keys = [{"id": k} for k in range(60)]
    assert restored_table.lookup(keys).equals(table.lookup(keys))
    assert _files(Path(tmp_store)) == before, "restoring changed the store"

    # snapshot exactly at the end (empty tail), then restore again
    table.snapshot()
    again = fl.connect(tmp_store, local_dir=str(tmp_path / "reader-2")).get_table("d.users")
    assert again.to_polars().sort("id").equals(expected)
    assert [again._tablets().kv_tablet(b).last_snapshot for b in range(3)] == [ends[b] for b in range(3)]

    # the restored connection writes on, and the original writer catches up with it
    restored_table.upsert([{"id": 1000, "name": "new", "score": 1}])
    model[1000] = ("new", 1)
    assert table.to_polars().sort("id").equals(_frame(model, table.schema.polars_schema))


@pytest.mark.s3
def test_restore_from_snapshot_plus_tail_s3(s3_url, tmp_path, changelog_replay):
    url, options = s3_url
    conn = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "writer"), snapshot_every=6)
    conn.create_database("d")
    conn.create_table("d.users", schema={"id": "INT", "name": "STRING", "score": "BIGINT"}, primary_key=["id"],
                      bucket_num=2)
    table = conn.get_table("d.users")
    model = _workload(table, random.Random(11), batches=25, keys=30)
    expected = _frame(model, table.schema.polars_schema)
    ends = table.end_offsets()
    objects = sorted(conn.store.fs.find(conn.store.root))

    fresh = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "reader")).get_table("d.users")
    restored = fresh.to_polars().sort("id")
    assert restored.equals(expected)
    assert restored.equals(changelog_replay(fresh))
    for b in range(2):
        assert 0 < fresh._tablets().kv_tablet(b).last_snapshot <= ends[b]
        # segments were downloaded from S3 into the reader's own local folder
        assert any(name.endswith(".arrow") for name in os.listdir(fresh._tablets().kv_tablet(b).kv.directory))
    assert sorted(conn.store.fs.find(conn.store.root)) == objects, "restoring changed the store"


def test_reading_leaves_no_files_in_a_local_store(tmp_store, tmp_path):
    """A process that only restores and catches up works in its own folder: the store is left as it was."""
    conn = fl.connect(tmp_store, local_dir=str(tmp_path / "writer"), snapshot_every=4)
    conn.create_database("d")
    conn.create_table("d.users", schema={"id": "INT", "name": "STRING", "score": "BIGINT"}, primary_key=["id"])
    table = conn.get_table("d.users")
    _workload(table, random.Random(3), batches=10, keys=20)
    table.upsert([{"id": 1, "name": "tail", "score": 0}])  # a tail after the last snapshot
    before = _files(Path(tmp_store))
    fl.connect(tmp_store, local_dir=str(tmp_path / "reader")).get_table("d.users").to_polars()
    assert _files(Path(tmp_store)) == before
