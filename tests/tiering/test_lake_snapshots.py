"""Lake snapshots (``$lake$snapshots``) and reads pinned to one: the same rows after more tiering rounds."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from tiering_helpers import LAKE_ON, sorted_rows

from fluss_lake.exceptions import InvalidConfigError, LakeSnapshotNotFoundError, TableNotExistError
from fluss_lake.training import FeatureView, state_as_of, training_set
from tiering import lake_snapshots, read_history, read_lake, tier_once, union_read

COLS = ["k", "v", "n"]


def _round(conn, lake, kv, rows, deletes=()):
    kv.upsert(rows)
    if deletes:
        kv.delete([{"k": k} for k in deletes])
    tier_once(conn, lake)
    time.sleep(0.005)  # distinct commit milliseconds between rounds


def test_snapshots_list_offsets_and_pinned_reads_stay_the_same_after_more_rounds(local):
    conn, lake = local
    conn.create_table("d.kv", schema={"k": "INT", "v": "STRING", "n": "BIGINT"}, primary_key=["k"], bucket_num=2,
                      options=LAKE_ON)
    kv = conn.get_table("d.kv")
    _round(conn, lake, kv, [{"k": k, "v": f"v{k}", "n": k} for k in range(20)])
    first = lake_snapshots(lake, "d.kv")
    first_history = lake_snapshots(lake, "d.kv", kind="history")
    assert first.height == 1 and first_history.height == 1
    state1, history1 = read_lake(lake, "d.kv").collect(), read_history(lake, "d.kv").collect()
    union1 = union_read(kv, lake).collect()
    ends1 = {(None, b): o for b, o in kv.end_offsets().items()}
    assert {(o["partition"], o["bucket"]): o["offset"] for o in first["offsets"][0]} == ends1
    assert first["total_records"][0] == 20 and first["tiered_at"][0] is not None

    _round(conn, lake, kv, [{"k": 3, "v": "changed", "n": -3}, {"k": 50, "v": "new", "n": 50}], deletes=[4])
    _round(conn, lake, kv, [{"k": 7, "v": "again", "n": 7}], deletes=[8, 9])
    snaps, hist_snaps = lake_snapshots(lake, "d.kv"), lake_snapshots(lake, "d.kv", kind="history")
    assert snaps.height == 3 and snaps["snapshot_id"][0] == first["snapshot_id"][0]
    assert snaps["committed_at"].is_sorted() and snaps["parent_id"][1:].to_list() == snaps["snapshot_id"][:-1].to_list()
    last = {(o["partition"], o["bucket"]): o["offset"] for o in snaps["offsets"][-1]}
    assert last == {(None, b): o for b, o in kv.end_offsets().items()} and last != ends1
    assert snaps["deleted_records"][1] == 2  # k=3 rewritten and k=4 deleted: two position deletes

    s1, h1 = first["snapshot_id"][0], first_history["snapshot_id"][0]
    # the current reads moved on; the pinned ones did not
    assert sorted_rows(read_lake(lake, "d.kv").collect(), COLS) != sorted_rows(state1, COLS)
    assert read_lake(lake, "d.kv", snapshot_id=s1).collect().sort("k").equals(state1.sort("k"))
    assert read_history(lake, "d.kv", snapshot_id=h1).collect().sort("__bucket", "__offset").equals(
        history1.sort("__bucket", "__offset"))
    assert union_read(kv, lake, snapshot_id=s1).collect().sort("k").equals(union1.sort("k"))
    # as_of: the latest snapshot committed at or before the time
    at1 = first["committed_at"][0]
    assert read_lake(lake, "d.kv", as_of=at1).collect().sort("k").equals(state1.sort("k"))
    just_before_2 = snaps["committed_at"][1] - timedelta(microseconds=1)
    assert read_lake(lake, "d.kv", as_of=just_before_2.isoformat()).collect().sort("k").equals(state1.sort("k"))
    assert read_lake(lake, "d.kv", as_of=datetime.now(UTC)).collect().sort("k").equals(
        read_lake(lake, "d.kv").collect().sort("k"))
    # state_as_of and training sets on a pinned history are reproducible too
    pinned = read_history(lake, "d.kv", snapshot_id=h1)
    assert state_as_of(pinned, primary_key=["k"]).collect().equals(state1.select(COLS).sort("k"))
    entities = state1.select("k", prediction_ts=pl.lit(datetime.now(UTC)))
    train = training_set(entities, FeatureView(pinned, keys=["k"], features=["v"]))
    assert train["v"].to_list() == state1["v"].to_list()


def test_pinned_reads_refuse_bad_pins_and_change_nothing(local):
    conn, lake = local
    conn.create_table("d.kv", schema={"k": "INT", "v": "STRING"}, primary_key=["k"], options=LAKE_ON)
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    kv = conn.get_table("d.kv")
    conn.get_table("d.ev").append([{"v": 1}])
    _round(conn, lake, kv, [{"k": 1, "v": "a"}])
    before = lake_snapshots(lake, "d.kv")
    s = before["snapshot_id"][0]
    other = lake_snapshots(lake, "d.ev")["snapshot_id"][0]
    with pytest.raises(InvalidConfigError, match="not both"):
        read_lake(lake, "d.kv", snapshot_id=s, as_of=datetime.now(UTC))
    with pytest.raises(LakeSnapshotNotFoundError, match="lake_snapshots"):
        read_lake(lake, "d.kv", snapshot_id=other)  # another table's snapshot
    with pytest.raises(LakeSnapshotNotFoundError, match="no snapshot committed at or before"):
        read_history(lake, "d.kv", as_of=datetime(2000, 1, 1))
    with pytest.raises(LakeSnapshotNotFoundError):
        union_read(kv, lake, snapshot_id=s + 1 if s + 1 != other else s + 2)
    with pytest.raises(InvalidConfigError, match="ISO"):
        read_lake(lake, "d.kv", as_of="yesterday")
    with pytest.raises(InvalidConfigError, match="snapshot_id"):
        read_lake(lake, "d.kv", snapshot_id="1")
    with pytest.raises(TableNotExistError, match="tier it first"):
        lake_snapshots(lake, "d.missing")
    assert lake_snapshots(lake, "d.kv").equals(before)
    assert read_lake(lake, "d.kv", snapshot_id=s).collect()["v"].to_list() == ["a"]
