"""A process catching up with another's many small changelog batches converts each run of batches with the same
columns once: its state, the changelog offset of every row and the rows of a column added meanwhile are exactly
the writer's."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

import fluss_lake as fl


def test_a_reader_catching_up_with_small_batches_has_the_writers_state_and_offsets(tmp_path) -> None:
    writer_conn = fl.connect(tmp_path)
    writer_conn.create_database("d")
    writer_conn.create_table("d.pk", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"], bucket_num=2)
    reader = fl.connect(tmp_path).get_table("d.pk")
    # the reader's tablets are open (empty) before the writes
    assert reader.lookup([{"k": 1}], with_found=True)["_found"].to_list() == [False]
    table = writer_conn.get_table("d.pk")
    for i in range(25):  # small batches: several per bucket between two looks of the reader
        table.upsert([{"k": k, "v": i * 100 + k} for k in range(i % 7, i % 7 + 5)])
        if i % 6 == 5:
            table.delete([{"k": i % 7}])
    writer_conn.alter_table("d.pk", add_columns={"note": "STRING"})
    table = writer_conn.get_table("d.pk")
    for i in range(4):
        table.upsert([{"k": k, "v": -i, "note": f"n{i}"} for k in (2, 3)])
    keys = pl.DataFrame({"k": list(range(14))}, schema={"k": pl.Int32})
    reader = reader.refresh()
    got = reader.lookup(keys, with_found=True, with_offsets=True).sort("k")
    want = table.lookup(keys, with_found=True, with_offsets=True).sort("k")
    assert_frame_equal(got, want)
    # each found row's offset is that of its key's last changelog record
    log = table.scan_log().filter(pl.col("_change_type") != "-U")
    last = log.group_by("k").agg(pl.col("_offset").last(), pl.col("_change_type").last())
    found = got.filter(pl.col("_found")).join(last, on="k", suffix="_log")
    assert found.height == last.filter(pl.col("_change_type") != "-D").height > 0
    assert (found["_offset"] == found["_offset_log"]).all()
    assert got.filter(pl.col("k").is_in([2, 3]))["note"].to_list() == ["n3", "n3"]
