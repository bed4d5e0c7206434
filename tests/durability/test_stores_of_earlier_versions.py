"""A store written by the version before checksums (``tests/fixtures/store-before-checksums.tgz``, made by
``tests/fixtures/make_store_before_checksums.py`` with that version) reads the same with this one: its objects are
"not verified" (said once per table in the log), verification finds no damage, and new writes seal their objects."""

from __future__ import annotations

import logging
import os
import runpy
import tarfile

import polars as pl

import fluss_lake as fl

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures")


def _answers(conn: fl.Connection) -> dict[str, pl.DataFrame]:
    ev, kv = conn.get_table("d.ev"), conn.get_table("d.kv")
    keys = pl.DataFrame({"id": [0, 1, 2, 3, 1500, 3100, 4499, 9999], "day": ["b", "a", "a", "b", "b", "a", "a", "a"]})
    return {
        "log": ev.scan_log().sort("_bucket", "_offset"),
        "state": kv.to_polars().sort("day", "id"),
        "changelog": kv.scan_log().sort("_partition", "_bucket", "_offset").drop("_commit_timestamp"),
        "lookup": kv.new_lookup().lookup(keys, with_found=True),
    }


def test_a_store_without_checksums_reads_the_same_and_verifies_clean(tmp_path, caplog) -> None:
    with tarfile.open(os.path.join(FIXTURES, "store-before-checksums.tgz")) as archive:
        archive.extractall(tmp_path / "old", filter="data")
    old_root = str(tmp_path / "old" / "store")
    writes = runpy.run_path(os.path.join(FIXTURES, "make_store_before_checksums.py"))
    writes["make"](str(tmp_path / "new"))  # the same writes, with this version
    expected = _answers(fl.connect(str(tmp_path / "new")))
    with caplog.at_level(logging.WARNING, logger="fluss_lake.integrity"):
        old = fl.connect(old_root)
        for name, frame in _answers(old).items():
            assert frame.equals(expected[name]), name
        reports = {r.table: r for r in old.verify()}
    assert reports["d.ev"].ok and reports["d.kv"].ok and not reports["d.ev"].damage and not reports["d.kv"].damage
    assert reports["d.ev"].unverified >= 6 and reports["d.kv"].unverified >= 6  # batches, manifests, segments
    said = [r.getMessage() for r in caplog.records if "not verified" in r.getMessage()]
    assert sum("d.ev" in m for m in said) == 1 and sum("d.kv" in m for m in said) == 1, said
    assert not fl.connect(old_root).get_table_info("d.ev").checksums
    # writes into the old tables seal their objects; old and new objects read together
    old.get_table("d.kv").upsert(pl.DataFrame({"id": [0, 7000], "v": ["again", "new"], "day": ["b", "a"]}))
    old.get_table("d.ev").append(pl.DataFrame({"id": [7000], "v": ["new"]}))
    old.get_table("d.kv").snapshot()
    fresh = fl.connect(old_root)
    state = fresh.get_table("d.kv").to_polars()
    assert state.filter(pl.col("id") == 0)["v"].to_list() == ["again"]
    assert state.height == expected["state"].height + 1
    assert fresh.get_table("d.ev").scan_log().height == expected["log"].height + 1
    after = {r.table: r for r in fresh.verify()}
    assert after["d.kv"].ok and after["d.ev"].ok
    assert after["d.ev"].unverified == reports["d.ev"].unverified  # the new batch is sealed
