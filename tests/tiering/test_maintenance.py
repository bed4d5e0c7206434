"""Lake maintenance: orphan files left by a round that died before its commit, and the CLI flag that removes them.

A round "dies" here by an exception raised from inside its commit, after its data files were written and before
the catalog commit (what a SIGKILL at that moment leaves; test_tiering_sigkill.py kills real processes).
"""

from __future__ import annotations

import os

import polars as pl
import pyarrow.fs as pafs
import pytest
from tiering_helpers import LAKE_ON, lake_rows, sorted_rows

import tiering.deletes
from fluss_lake.exceptions import InvalidConfigError
from tiering import (
    CompactionPolicy,
    LakeSnapshot,
    compact_history,
    read_history,
    tier_table,
)
from tiering.cli import main as cli_main
from tiering.orphans import remove_orphan_files


class _Killed(BaseException):
    """Stands for the process dying mid-round (a BaseException: nothing on the way catches it)."""


def _die_after_writing(monkeypatch) -> None:
    def die(*args, **kwargs):
        raise _Killed()

    monkeypatch.setattr(tiering.deletes, "write_position_deletes", die)  # data files are written by then


def _exists(lake, location: str) -> bool:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    io = PyArrowFileIO(properties=lake.properties)
    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    return io.fs_by_scheme(scheme, netloc).get_file_info(path).type == pafs.FileType.File


@pytest.mark.parametrize("setup", ["local", pytest.param("on_s3", marks=pytest.mark.s3)])
def test_files_of_a_round_that_died_are_removed_after_the_grace_period_only(setup, request, monkeypatch):
    conn, lake = request.getfixturevalue(setup)
    conn.create_table("d.kv", schema={"k": "BIGINT", "v": "STRING"}, primary_key=["k"], bucket_num=2,
                      options=LAKE_ON)
    kv = conn.get_table("d.kv")
    kv.upsert(pl.DataFrame({"k": range(50), "v": ["a"] * 50}))
    tier_table(kv, lake)
    kv.upsert(pl.DataFrame({"k": range(10), "v": ["b"] * 10}))
    with monkeypatch.context() as patch:
        _die_after_writing(patch)
        with pytest.raises(_Killed):
            tier_table(kv, lake)
    [main, history] = remove_orphan_files(lake, "d.kv", older_than_s=3600)  # all young: nothing removed
    assert main.removed == () and main.too_recent and main.referenced > 0
    assert all(p.endswith(".parquet") and "/data/" in p for p in main.too_recent)
    dry = remove_orphan_files(lake, "d.kv", older_than_s=0, dry_run=True)[0]
    assert dry.removed == main.too_recent and all(_exists(lake, p) for p in dry.removed)
    referenced_before = _live_files(lake)
    [main, _] = remove_orphan_files(lake, "d.kv", older_than_s=0)
    assert main.removed == dry.removed and not any(_exists(lake, p) for p in main.removed)
    assert all(_exists(lake, p) for p in referenced_before)  # nothing a snapshot names was touched
    assert remove_orphan_files(lake, "d.kv", older_than_s=0)[0].removed == ()
    tier_table(kv, lake)  # the round is redone and the lake is complete
    assert sorted_rows(lake_rows(lake, "d.kv"), ["k", "v"]) == sorted_rows(kv.to_polars(), ["k", "v"])
    del history


def _live_files(lake) -> list[str]:
    table = lake.load("d.kv")
    files = [table.metadata_location]
    for snapshot in table.metadata.snapshots:
        files.append(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            files.append(manifest.manifest_path)
            files += [e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False)]
    return files


def test_cli_removes_orphans_with_once_and_refuses_a_bad_grace(local, monkeypatch, capsys):
    conn, lake = local
    conn.create_table("d.kv", schema={"k": "BIGINT"}, primary_key=["k"], options=LAKE_ON)
    kv = conn.get_table("d.kv")
    kv.upsert([{"k": 1}])
    tier_table(kv, lake)
    kv.upsert([{"k": 1}, {"k": 2}])
    with monkeypatch.context() as patch:
        _die_after_writing(patch)
        with pytest.raises(_Killed):
            tier_table(kv, lake)
    orphans = remove_orphan_files(lake, "d.kv", older_than_s=0, dry_run=True)[0].removed
    assert orphans
    store = os.fspath(conn.store.local_path(""))
    assert cli_main(["tier", "--once", "--store", store, "--remove-orphan-files", "--orphan-grace", "0"]) == 0
    out = capsys.readouterr().out
    assert f"removed {len(orphans)} orphan file(s)" in out
    assert not any(_exists(lake, p) for p in orphans)
    assert sorted(lake_rows(lake, "d.kv")["k"].to_list()) == [1, 2]
    assert cli_main(["tier", "--continuous", "--store", store, "--remove-orphan-files"]) == 2
    with pytest.raises(InvalidConfigError, match="older_than_s"):
        remove_orphan_files(lake, "d.kv", older_than_s=-1)


def test_history_small_files_are_merged_with_the_same_rows_and_offsets(local):
    conn, lake = local
    conn.create_table("d.kv", schema={"k": "BIGINT", "v": "STRING"}, primary_key=["k"], bucket_num=2,
                      options=LAKE_ON)
    kv = conn.get_table("d.kv")
    for r in range(6):  # six rounds: about six small history files per bucket partition
        kv.upsert(pl.DataFrame({"k": range(r, r + 20), "v": [str(r)] * 20}))
        tier_table(kv, lake, compaction=None)
    history = lake.load("d.kv", "history")
    before_files = [t.file for t in history.scan().plan_files()]
    before_rows = sorted_rows(read_history(lake, "d.kv").collect(), ["__bucket", "__offset", "__change_type", "k", "v"])
    offsets = LakeSnapshot.of_table(history).offsets
    report = compact_history(kv, lake, policy=CompactionPolicy(max_history_files=4))
    assert report.committed and report.data_files_rewritten == len(before_files) >= 10
    history = lake.load("d.kv", "history")
    after_files = [t.file for t in history.scan().plan_files()]
    assert len(after_files) == 2  # one per bucket partition
    assert sorted_rows(read_history(lake, "d.kv").collect(),
                       ["__bucket", "__offset", "__change_type", "k", "v"]) == before_rows
    assert LakeSnapshot.of_table(history).offsets == offsets
    assert not compact_history(kv, lake, policy=CompactionPolicy(max_history_files=4)).committed
    for r in range(6):  # the rounds run it themselves with their policy
        kv.upsert([{"k": 100 + r, "v": "x"}])
        last = tier_table(kv, lake, compaction=CompactionPolicy(max_history_files=3, check_every=1))
        if last.history_files_compacted:
            break
    assert last.history_files_compacted >= 4
    assert last.history_snapshot_id == lake.load("d.kv", "history").current_snapshot().snapshot_id
    assert read_history(lake, "d.kv").collect().height == sum(1 for _ in kv.changelog().iter_rows())
