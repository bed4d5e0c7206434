"""A store with nested columns written by the version before nested type strings
(``tests/fixtures/store-before-nested-types.tgz``, made by ``tests/fixtures/make_store_before_nested_types.py`` with
that version) reads the same with this one: schema, rows, lookups and changelog; and it takes nested writes."""

from __future__ import annotations

import os
import runpy
import tarfile

import polars as pl

import fluss_lake as fl

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures")


def _answers(conn: fl.Connection) -> dict[str, object]:
    table = conn.get_table("d.nested")
    return {
        "types": [c.type_name for c in table.schema.columns],
        "dtypes": table.schema.polars_schema,
        "state": table.to_polars().sort("id"),
        "lookup": table.lookup(pl.DataFrame({"id": [0, 1, 3, 9]}, schema={"id": pl.Int32}), with_found=True),
        "changelog": table.scan_log().sort("_bucket", "_offset").drop("_commit_timestamp"),
    }


def test_a_store_with_nested_columns_from_the_earlier_version_reads_the_same(tmp_path) -> None:
    with tarfile.open(os.path.join(FIXTURES, "store-before-nested-types.tgz")) as archive:
        archive.extractall(tmp_path / "old", filter="data")
    runpy.run_path(os.path.join(FIXTURES, "make_store_before_nested_types.py"))["make"](str(tmp_path / "new"))
    expected = _answers(fl.connect(str(tmp_path / "new")))
    old = fl.connect(str(tmp_path / "old" / "store"))
    got = _answers(old)
    assert got["types"] == expected["types"] == [
        "INT", "ARRAY<STRING>", "ROW<zip INT, lines ARRAY<STRING>>", "MAP<STRING, DOUBLE>", "ARRAY<FLOAT>(3)",
        "ARRAY<ROW<a BIGINT>>"]
    assert got["dtypes"] == expected["dtypes"] and got["dtypes"]["emb"] == pl.Array(pl.Float32, 3)
    for name in ("state", "lookup", "changelog"):
        assert got[name].equals(expected[name]), name  # type: ignore[union-attr]
    table = old.get_table("d.nested")
    table.upsert([{"id": 7, "tags": ["x"], "addr": {"zip": 1}, "attrs": {"a": 1.5}, "emb": [1, 2, 3],
                   "more": [{"a": 2}]}])
    assert table.lookup([{"id": 7}]).to_dicts() == [{"id": 7, "tags": ["x"], "addr": {"zip": 1, "lines": None},
                                                     "attrs": {"a": 1.5}, "emb": [1.0, 2.0, 3.0], "more": [{"a": 2}]}]
