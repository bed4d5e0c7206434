"""KvTablet.scan_state is the one read of a bucket's current state: under the tablet lock it first applies the
changelog anyone committed (here another connection on the same folder), then returns the rows and the log offset
they include, eagerly or as a LazyFrame."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import fluss_lake as fl


def _table(tmp_path: Path, name: str) -> fl.Table:
    conn = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / name))
    conn.create_database("d", ignore_if_exists=True)
    conn.create_table("d.t", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"], bucket_num=1,
                      ignore_if_exists=True)
    return conn.get_table("d.t")


def test_scan_state_catches_up_with_writes_of_another_connection(tmp_path: Path) -> None:
    tablet = _table(tmp_path, "reader")._tablets().kv_tablet(0)
    rows, offset = tablet.scan_state()
    assert (rows.height, offset) == (0, 0)

    writer = _table(tmp_path, "writer")  # a second connection on the same folder
    writer.upsert(pl.DataFrame({"id": [1, 2, 3], "v": ["a", "b", "c"]}))  # +I +I +I: offsets 0-2
    writer.upsert(pl.DataFrame({"id": [1], "v": ["a2"]}))  # -U +U: 3-4
    writer.delete(pl.DataFrame({"id": [2]}))  # -D: 5
    assert tablet.applied == 0, "nothing caught up yet"

    rows, offset = tablet.scan_state()
    assert offset == 6 == tablet.applied
    assert isinstance(rows, pl.DataFrame)
    assert sorted(rows.rows()) == [(1, "a2"), (3, "c")]

    writer.upsert(pl.DataFrame({"id": [4], "v": ["d"]}))  # +I: 6
    lazy, lazy_offset = tablet.scan_state(lazy=True)
    assert isinstance(lazy, pl.LazyFrame)
    assert lazy_offset == 7 == tablet.applied
    assert sorted(lazy.collect().rows()) == [(1, "a2"), (3, "c"), (4, "d")]
    assert tablet.scan_state()[1] == 7, "no new changes: the same offset"
