"""Primary-key tiering merge-on-read: position-delete files, their reads, compaction, and exactly-once under races.

The lake is a real pyiceberg SqlCatalog on sqlite (local warehouse, or a moto ThreadedMotoServer bucket); the
lake state is read back four ways and compared with the live state: pyiceberg's own scan (independent of our
code), ``read_lake`` (Polars), ``union_read`` and a DuckDB view.
"""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFileContent, ManifestContent
from tiering_helpers import LAKE_ON, lake_rows, sorted_rows

import tiering.deletes
from fluss_lake.exceptions import InvalidConfigError
from tiering import (
    CompactionPolicy,
    Lake,
    LakeSnapshot,
    compact_table,
    read_lake,
    register_duckdb,
    tier_table,
    union_read,
)
from tiering.deletes import FILE_PATH_FIELD_ID, POS_FIELD_ID

SCHEMA = {"region": "TINYINT", "id": "BIGINT", "v": "BIGINT", "s": "STRING"}
PK = ["region", "id"]
COLUMNS = list(SCHEMA)


def _table(conn, name: str = "d.kv", buckets: int = 3):
    conn.create_table(name, schema=SCHEMA, primary_key=PK, bucket_num=buckets, options=LAKE_ON)
    return conn.get_table(name)


def _random_round(live, rng: np.random.Generator, keys: int, n: int) -> None:
    """A batch of upserts then a batch of deletes of random keys (some absent: deleting them is a no-op)."""
    region, ids = rng.integers(0, 3, n), rng.integers(0, keys, n)
    live.upsert(pl.DataFrame({"region": region.astype(np.int8), "id": ids, "v": rng.integers(0, 1 << 40, n),
                              "s": pl.Series(rng.integers(0, 100, n)).cast(pl.String)}))
    gone = rng.integers(0, keys, max(1, n // 4))
    live.delete(pl.DataFrame({"region": rng.integers(0, 3, gone.size).astype(np.int8), "id": gone}))


def _assert_lake_equals_live(live, lake: Lake, conn) -> None:
    want = sorted_rows(live.to_polars(), COLUMNS)
    assert sorted_rows(lake_rows(lake, live.path), COLUMNS) == want  # pyiceberg's scan applies our deletes
    assert sorted_rows(read_lake(lake, live.path).collect(), COLUMNS) == want
    assert sorted_rows(union_read(live, lake).collect(), COLUMNS) == want
    con = duckdb.connect()
    register_duckdb(con, lake, tables=[live.path])  # lake only: the view must apply the deletes itself
    assert sorted_rows(con.sql(f"select * from {live.path}").pl(), COLUMNS) == want


def _files(lake: Lake, path: str) -> tuple[list, list, list]:
    """(data files, delete files, manifests) of the current snapshot, straight from the manifests."""
    table = lake.load(path)
    manifests = table.current_snapshot().manifests(table.io)
    entries = [e.data_file for m in manifests for e in m.fetch_manifest_entry(table.io)]
    return ([f for f in entries if f.content == DataFileContent.DATA],
            [f for f in entries if f.content == DataFileContent.POSITION_DELETES], manifests)


@pytest.mark.parametrize("setup", ["local", pytest.param("on_s3", marks=pytest.mark.s3)])
def test_random_upserts_and_deletes_keep_the_lake_equal_to_live_through_every_reader(setup, request):
    conn, lake = request.getfixturevalue(setup)
    live = _table(conn)
    rng = np.random.default_rng(5)
    rounds = 8 if setup == "local" else 3
    for r in range(rounds):
        _random_round(live, rng, keys=300, n=120)
        report = tier_table(live, lake, compaction=None if r < rounds - 2 else
                            CompactionPolicy(delete_ratio=0.2, check_every=1))
        assert report.committed
        _assert_lake_equals_live(live, lake, conn)
        if r:
            assert report.position_deletes > 0  # updates and deletes of keys tiered earlier
    # the live tail (not tiered yet) folds into the union read over a lake that has delete files
    _random_round(live, rng, keys=300, n=60)
    assert sorted_rows(union_read(live, lake).collect(), COLUMNS) == sorted_rows(live.to_polars(), COLUMNS)
    history = lake_rows(lake, live.path, "history")
    assert history.select("__bucket", "__offset").is_duplicated().sum() == 0


def test_delete_files_follow_the_iceberg_spec_and_name_only_old_positions(local):
    conn, lake = local
    live = _table(conn, buckets=2)
    live.upsert(pl.DataFrame({"region": [0] * 50, "id": range(50), "v": range(50), "s": ["a"] * 50}))
    tier_table(live, lake)
    live.upsert(pl.DataFrame({"region": [0] * 5, "id": [1, 2, 3, 4, 49], "v": [-1] * 5, "s": ["b"] * 5}))
    live.delete([{"region": 0, "id": 7}])
    report = tier_table(live, lake, compaction=None)
    assert report.position_deletes == 6 and report.files_rewritten == 0
    data, deletes, manifests = _files(lake, live.path)
    assert report.delete_files == len(deletes) == 2  # one per touched bucket partition
    assert {m.content for m in manifests} == {ManifestContent.DATA, ManifestContent.DELETES}
    summary = lake.load(live.path).current_snapshot().summary
    assert summary["added-position-deletes"] == "6" and summary["added-delete-files"] == "2"
    assert LakeSnapshot.of_table(lake.load(live.path)).offsets  # the offsets are in the same snapshot
    by_path = {f.file_path: f for f in data}
    deleted_keys = []
    for delete_file in deletes:
        local_path = delete_file.file_path.removeprefix("file://")
        schema = pq.read_schema(local_path)
        assert [(f.name, str(f.type), f.metadata[b"PARQUET:field_id"]) for f in schema] == [
            ("file_path", "string", str(FILE_PATH_FIELD_ID).encode()), ("pos", "int64", str(POS_FIELD_ID).encode())]
        rows = pq.read_table(local_path).to_pylist()
        assert rows == sorted(rows, key=lambda r: (r["file_path"], r["pos"]))
        for row in rows:
            target = by_path[row["file_path"]]
            assert target.partition == delete_file.partition  # a delete file deletes in its own partition only
            ids = pq.read_table(target.file_path.removeprefix("file://"), columns=["id"])["id"].to_pylist()
            deleted_keys.append(ids[row["pos"]])
    assert sorted(deleted_keys) == [1, 2, 3, 4, 7, 49]
    _assert_lake_equals_live(live, lake, conn)


def test_compaction_rewrites_heavily_deleted_files_and_merges_delete_files(local):
    conn, lake = local
    live = _table(conn, buckets=2)
    live.upsert(pl.DataFrame({"region": [1] * 200, "id": range(200), "v": range(200), "s": ["a"] * 200}))
    tier_table(live, lake)
    for r in range(5):  # 10% of the keys per round: position deletes pile up
        live.upsert(pl.DataFrame({"region": [1] * 20, "id": range(r * 20, r * 20 + 20), "v": [r] * 20,
                                  "s": ["u"] * 20}))
        tier_table(live, lake, compaction=None)
    data, deletes, _ = _files(lake, live.path)
    assert len(deletes) == 10 and len(data) == 2 + 10
    offsets = LakeSnapshot.of_table(lake.load(live.path)).offsets
    want = sorted_rows(live.to_polars(), COLUMNS)
    # merging: 5 delete files per partition > 3; no data file reaches 90% deleted, so no data file is rewritten
    report = compact_table(live, lake, policy=CompactionPolicy(delete_ratio=0.9, max_delete_files=3))
    assert report.committed and report.data_files_rewritten == 0
    assert (report.delete_files_removed, report.delete_files_written) == (10, 2)
    data_after, deletes_after, manifests = _files(lake, live.path)
    assert {f.file_path for f in data_after} == {f.file_path for f in data} and len(deletes_after) == 2
    # folded: one data manifest, the new delete manifest, and one recording the removed delete files
    assert len(manifests) == 3 == report.manifests_after < report.manifests_before
    assert sorted_rows(lake_rows(lake, live.path), COLUMNS) == want
    assert LakeSnapshot.of_table(lake.load(live.path)).offsets == offsets  # compaction carries the offsets
    # the first files have about 50% of their rows deleted (ids 0-99 of 200): a 0.3 ratio rewrites them
    report = compact_table(live, lake, policy=CompactionPolicy(delete_ratio=0.3))
    assert report.data_files_rewritten == 2 and report.rows_dropped == 100 and report.rows_rewritten == 100
    assert sorted_rows(lake_rows(lake, live.path), COLUMNS) == want
    assert _files(lake, live.path)[1] == []  # every delete was in those files: no delete file is left
    live.upsert(pl.DataFrame({"region": [1] * 10, "id": range(190, 200), "v": [7] * 10, "s": ["w"] * 10}))
    tier_table(live, lake, compaction=None)
    assert _files(lake, live.path)[1]
    # force: no delete file is left and the results are the same
    report = compact_table(live, lake, force=True)
    data_final, deletes_final, _ = _files(lake, live.path)
    assert report.committed and deletes_final == [] and sum(f.record_count for f in data_final) == 200
    _assert_lake_equals_live(live, lake, conn)
    assert LakeSnapshot.of_table(lake.load(live.path)).bucket_offsets() == live.end_offsets()  # carried over
    assert lake.load(live.path).current_snapshot().summary["fluss-offsets"]
    assert not compact_table(live, lake, force=True).committed  # nothing left to do: no commit
    # the tiering round runs compaction itself with its policy
    live.upsert(pl.DataFrame({"region": [1] * 120, "id": range(120), "v": [9] * 120, "s": ["z"] * 120}))
    report = tier_table(live, lake, compaction=CompactionPolicy(delete_ratio=0.5, check_every=1))
    assert report.files_compacted >= 1 and report.snapshot_id == lake.load(live.path).current_snapshot().snapshot_id
    _assert_lake_equals_live(live, lake, conn)


def test_a_round_that_loses_the_race_plans_again_without_double_deletes(local, monkeypatch):
    conn, lake = local
    live = _table(conn, buckets=2)
    live.upsert(pl.DataFrame({"region": [2] * 100, "id": range(100), "v": range(100), "s": ["a"] * 100}))
    tier_table(live, lake)
    live.upsert(pl.DataFrame({"region": [2] * 10, "id": range(10), "v": [-1] * 10, "s": ["b"] * 10}))
    live.delete([{"region": 2, "id": 50}])
    rival = Lake(lake.properties)  # another tiering process: own catalog connection and own caches
    real = tiering.deletes.write_position_deletes
    raced = []

    def write_then_lose(*args, **kwargs):
        if not raced:  # while this round writes its files, the rival tiers the same changes and commits first
            raced.append(None)
            raced[0] = tier_table(conn.get_table(live.path), rival, compaction=None)
        return real(*args, **kwargs)

    monkeypatch.setattr(tiering.deletes, "write_position_deletes", write_then_lose)
    report = tier_table(live, lake, compaction=None)
    assert raced[0].committed and raced[0].position_deletes == 11
    assert report.conflicts >= 1  # the stale plan was refused; re-planned, nothing was left to tier
    assert report.position_deletes == 0 and report.rows == 0
    _, deletes, _ = _files(lake, live.path)
    assert sum(f.record_count for f in deletes) == 11  # each old row deleted exactly once
    assert LakeSnapshot.of_table(lake.load(live.path)).bucket_offsets() == live.end_offsets()
    _assert_lake_equals_live(live, lake, conn)


def test_compaction_racing_a_round_never_regresses_offsets(local, monkeypatch):
    conn, lake = local
    live = _table(conn, buckets=2)
    live.upsert(pl.DataFrame({"region": [0] * 60, "id": range(60), "v": range(60), "s": ["a"] * 60}))
    tier_table(live, lake)
    live.upsert(pl.DataFrame({"region": [0] * 40, "id": range(40), "v": [1] * 40, "s": ["b"] * 40}))
    tier_table(live, lake, compaction=None)
    live.upsert(pl.DataFrame({"region": [0] * 5, "id": range(55, 60), "v": [2] * 5, "s": ["c"] * 5}))
    real = tiering.deletes.write_position_deletes
    raced = []

    def round_commits_first(*args, **kwargs):
        if not raced:  # a tiering round commits while compaction is writing its files
            raced.append(None)
            raced[0] = tier_table(conn.get_table(live.path), Lake(lake.properties), compaction=None)
        return real(*args, **kwargs)

    monkeypatch.setattr(tiering.deletes, "write_position_deletes", round_commits_first)
    report = compact_table(live, lake, force=True)
    assert raced[0].committed and report.committed  # compaction re-planned on the round's snapshot
    assert LakeSnapshot.of_table(lake.load(live.path)).bucket_offsets() == live.end_offsets()
    assert _files(lake, live.path)[1] == []
    _assert_lake_equals_live(live, lake, conn)


def test_bad_compaction_policies_are_refused(local):
    conn, lake = local
    live = _table(conn)
    live.upsert([{"region": 0, "id": 1, "v": 1, "s": "a"}])
    tier_table(live, lake)
    before = lake.load(live.path).current_snapshot().snapshot_id
    for bad in ({"delete_ratio": 0}, {"delete_ratio": 1.5}, {"max_delete_files": 0}, {"max_manifests": 1},
                {"check_every": 0}):
        with pytest.raises(InvalidConfigError, match=r"must be|pass a (whole )?number"):
            compact_table(live, lake, policy=CompactionPolicy(**bad))
    assert lake.load(live.path).current_snapshot().snapshot_id == before
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    assert not compact_table(conn.get_table("d.ev"), lake).committed  # log tables have no deletes
