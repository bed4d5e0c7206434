"""Bounded reads convert a run of consecutive small batches with the same columns into one frame: the rows,
offsets, change types and commit timestamps are exactly those of reading batch by batch, a start inside a batch
cuts its head, and a batch with other columns (a column added meanwhile) starts a new run."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

import fluss_lake as fl
from fluss_lake.log.log_reads import iter_range, read_range


def _log_table(tmp_path) -> fl.Table:
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    conn.create_table("d.ev", schema={"k": "INT", "v": "BIGINT"}, bucket_num=2, bucket_keys=["k"])
    events = conn.get_table("d.ev")
    for i in range(20):  # 20 small batches per bucket
        events.append([{"k": k, "v": i * 10 + k} for k in range(4)])
    conn.alter_table("d.ev", add_columns={"extra": "STRING"})
    events = conn.get_table("d.ev")
    for i in range(5):
        events.append([{"k": k, "v": 1000 + i, "extra": f"x{i}"} for k in range(4)])
    return events


def test_a_run_of_batches_reads_as_one_frame_equal_to_batch_by_batch(tmp_path) -> None:
    events = _log_table(tmp_path)
    tablets = events._tablets()
    columns = ["k", "v", "extra"]
    for bucket in range(2):
        end = events.end_offsets()[bucket]
        for start in (0, 1, 3, end - 2):  # from the start and from inside a batch
            coalesced = read_range(tablets, bucket, start, end, columns, [], set())
            one_by_one = list(iter_range(tablets, bucket, start, end, columns, [], set()))
            assert len(coalesced) <= 2 < len(one_by_one) or start == end - 2  # one frame per run of columns
            assert_frame_equal(pl.concat(coalesced), pl.concat(one_by_one))
            offsets = pl.concat(coalesced)["_offset"].to_list()
            assert offsets == list(range(start, end))


def test_commit_timestamps_and_change_types_follow_each_batch(tmp_path) -> None:
    events = _log_table(tmp_path)
    rows = events.scan_log(start_offsets={0: 1, 1: 0})
    for bucket in range(2):
        headers = events.batch_headers(bucket)
        mine = rows.filter(pl.col("_bucket") == bucket)
        expected = [int(h.commit_ts) for h in headers for _ in range(h.record_count)]
        expected = expected[1:] if bucket == 0 else expected
        got = mine["_commit_timestamp"].dt.epoch("ms").to_list()
        assert got == expected
        assert set(mine["_change_type"]) == {"+A"}
    assert rows.filter(pl.col("v") >= 1000)["extra"].null_count() == 0
    assert rows.filter(pl.col("v") < 1000)["extra"].null_count() == rows.filter(pl.col("v") < 1000).height


def test_primary_key_changelog_reads_are_the_same_coalesced(tmp_path) -> None:
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    conn.create_table("d.pk", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"], bucket_num=2)
    table = conn.get_table("d.pk")
    for i in range(15):
        table.upsert([{"k": k, "v": i} for k in range(6)])
        if i % 4 == 3:
            table.delete([{"k": i % 6}])
    tablets = table._tablets()
    for bucket in range(2):
        end = table.end_offsets()[bucket]
        for kinds in (None, frozenset({"-D"}), frozenset({"+U", "-D"})):
            coalesced = read_range(tablets, bucket, 2, end, ["k", "v"], [], set(), kinds)
            one_by_one = list(iter_range(tablets, bucket, 2, end, ["k", "v"], [], set(), kinds))
            assert len(coalesced) <= 1
            if one_by_one:
                assert_frame_equal(pl.concat(coalesced), pl.concat(one_by_one))
