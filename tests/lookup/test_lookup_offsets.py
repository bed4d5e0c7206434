"""Lookups with ``with_offsets=True``: each row's bucket and the changelog offset of its last change, checked
against the changelog itself after random writes (keys repeated within a batch, deletes), memtable flushes,
file merges (in memory and spilled column by column), a reader that catches up from the changelog, and a
reopened table. Segments written before offsets were kept read as null (unknown)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fluss_lake as fl
from fluss_lake.kv import compactor, kv_store, segment, segment_merge

_SCHEMA = {"customer": "INT", "order_id": "STRING", "amount": "INT"}
_KEY = ["customer", "order_id"]


def _orders(conn: fl.Connection, name: str = "o") -> fl.Table:
    conn.create_table(f"d.{name}", schema=_SCHEMA, primary_key=_KEY, bucket_keys=["customer"], bucket_num=2)
    return conn.get_table(f"d.{name}")


def _last_changes(table: fl.Table) -> pl.DataFrame:
    """From the changelog: per key, the bucket and offset of its last record, and whether that was a delete."""
    log = table.scan_log().filter(pl.col("_change_type") != "-U")
    last = log.group_by(_KEY).agg(pl.col("_bucket").last(), pl.col("_offset").max(),
                                  (pl.col("_change_type").sort_by("_offset").last() == "-D").alias("gone"))
    return last.sort(_KEY)


def _check(table: fl.Table) -> None:
    want = _last_changes(table)
    live = want.filter(~pl.col("gone"))
    keys = want.select(_KEY)
    got = table.new_lookup().lookup(keys, with_found=True, with_offsets=True)
    assert got.columns[-2:] == ["_bucket", "_offset"]
    assert got.get_column("_found").to_list() == (~want.get_column("gone")).to_list()
    found = got.filter(pl.col("_found"))
    assert found.get_column("_offset").to_list() == live.get_column("_offset").to_list()
    assert found.get_column("_bucket").to_list() == live.get_column("_bucket").to_list()
    assert got.filter(~pl.col("_found")).get_column("_offset").null_count() == int(want.get_column("gone").sum())
    customers = sorted(set(keys.get_column("customer").to_list()))
    prefix = table.prefix_lookup(pl.DataFrame({"customer": customers}, schema={"customer": pl.Int32}),
                                 with_offsets=True).sort(_KEY)
    assert prefix.select(*_KEY, "_bucket", "_offset").equals(live.select(*_KEY, "_bucket", "_offset"))


_BATCH = st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.sampled_from(["a", "b", "c"]), st.integers(0, 9)),
                  min_size=1, max_size=8)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(_BATCH, min_size=1, max_size=12), st.integers(0, 3))
def test_lookup_offsets_are_the_last_changelog_record_of_each_row(tmp_path_factory, monkeypatch, batches,
                                                                   flush_every) -> None:
    monkeypatch.setattr(kv_store, "_MIN_TIER_ROWS", 2)
    monkeypatch.setattr(kv_store, "MEMTABLE_BATCHES", 3)  # memtable merges and flushes to files, then file merges
    monkeypatch.setattr(segment_merge, "_SPILL_MERGE_ROWS", 6)  # the big-merge path too
    path = tmp_path_factory.mktemp("off")
    conn = fl.connect(path)
    conn.create_database("d")
    table = _orders(conn)
    for i, batch in enumerate(batches):
        upserts = [{"customer": c, "order_id": o, "amount": a} for d, c, o, a in batch if not d]
        deletes = [{"customer": c, "order_id": o} for d, c, o, _ in batch if d]
        if upserts:
            table.upsert(upserts)  # keys may repeat within a batch: the merge rounds path
        if deletes:
            table.delete(deletes)
        if flush_every and i % flush_every == 0:
            for bucket in range(2):
                table._tablets().kv_tablet(bucket).kv.flush_memtable()
    compactor.drain()
    if not _last_changes(table).height:
        return
    _check(table)
    reader = fl.connect(path).get_table("d.o")  # another connection: catches up from snapshots and the changelog
    _check(reader)
    for bucket in range(2):
        table._tablets().kv_tablet(bucket).compact()  # a full compaction, then a snapshot
    _check(table)
    _check(fl.connect(path).get_table("d.o"))


def test_partitioned_lookups_return_offsets_per_partition(tmp_path) -> None:
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    conn.create_table("d.p", schema={"day": "STRING", "id": "INT", "v": "INT"}, primary_key=["day", "id"],
                      partition_keys=["day"], bucket_num=2)
    table = conn.get_table("d.p")
    table.upsert([{"day": "mon", "id": 1, "v": 1}, {"day": "tue", "id": 1, "v": 2}])
    table.upsert([{"day": "tue", "id": 1, "v": 3}])
    got = table.new_lookup().lookup([{"day": "tue", "id": 1}, {"day": "mon", "id": 1}, {"day": "wed", "id": 1}],
                                    with_found=True, with_offsets=True)
    log = table.scan_log()
    tue = log.filter((pl.col("_partition") == "tue") & (pl.col("_change_type") == "+U"))
    mon = log.filter(pl.col("_partition") == "mon")
    assert got.get_column("_offset").to_list() == [tue.get_column("_offset").item(), mon.get_column("_offset").item(),
                                                   None]
    assert got.get_column("_bucket").to_list()[:2] == [tue.get_column("_bucket").item(),
                                                       mon.get_column("_bucket").item()]
    assert got.get_column("_found").to_list() == [True, True, False]


def test_segments_without_offsets_read_as_unknown(tmp_path) -> None:
    """A segment written before offsets were kept has no offset column: its rows' offsets are null."""
    store = kv_store.KvStore(str(tmp_path / "b0"), pl.Schema({"id": pl.Int64, "v": pl.Int64}), ["id"])
    ids = np.array([3, 1, 2], dtype=np.int64)
    frame = pl.DataFrame({"id": ids, "v": ids * 10})
    hashes = np.array([30, 10, 20], dtype=np.uint64)
    order = np.argsort(hashes)
    old = frame[order].to_arrow().append_column(kv_store.HASH_COLUMN, pa.array(hashes[order]))
    old = old.append_column(kv_store.TOMB_COLUMN, pa.array(np.zeros(3, np.uint8)))
    store.adopt([segment.write_segment(store.directory, old)])
    assert kv_store.OFFSET_COLUMN not in store.segments[0].table.column_names
    store.apply(np.array([40], dtype=np.uint64), pl.DataFrame({"id": [4], "v": [40]}), np.array([False]), 0,
                offsets=np.array([7]))
    found, rows = store.lookup(np.array([20, 40, 50], dtype=np.uint64), pl.DataFrame({"id": [2, 4, 5]}),
                               with_offsets=True)
    assert found.tolist() == [True, True, False]
    assert rows.get_column(kv_store.OFFSET_COLUMN).to_list() == [None, 7, None]
    store.flush_memtable()
    store._merge(0, len(store.segments))  # old and new rows merged: the old ones stay unknown
    found, rows = store.lookup(np.array([20, 40], dtype=np.uint64), pl.DataFrame({"id": [2, 4]}), with_offsets=True)
    assert rows.get_column(kv_store.OFFSET_COLUMN).to_list() == [None, 7]
    ranged = store.range_rows(np.array([0], dtype=np.uint64), np.array([0], dtype=np.uint64), with_offsets=True)
    assert dict(zip(ranged.get_column("id").to_list(), ranged.get_column(kv_store.OFFSET_COLUMN).to_list())) == \
        {1: None, 2: None, 3: None, 4: 7}


@pytest.mark.parametrize("bucket_num", [1, 3])
def test_lookup_without_offsets_has_no_system_columns(tmp_path, bucket_num) -> None:
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    conn.create_table("d.u", schema={"id": "INT", "v": "INT"}, primary_key=["id"], bucket_num=bucket_num)
    table = conn.get_table("d.u")
    table.upsert([{"id": i, "v": i} for i in range(5)])
    assert table.new_lookup().lookup([{"id": 1}], with_found=True).columns == ["id", "v", "_found"]
    got = table.new_lookup().lookup([{"id": 1}, {"id": 9}], with_offsets=True)
    assert got.columns == ["id", "v", "_bucket", "_offset"]
    assert got.get_column("_offset").null_count() == 1
