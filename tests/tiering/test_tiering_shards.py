"""Tiering split into shards: each round tiers the (partition, bucket) pairs its shard owns; shards running at the
same time in separate processes commit to Iceberg exactly once and never lose each other's offsets."""

from __future__ import annotations

import argparse
import io
import multiprocessing as mp

import polars as pl
import pytest
from tiering_helpers import LAKE_ON, lake_rows, sorted_rows

import fluss_lake as fl
from fluss_lake.jobs import Shard
from tiering import Lake, tier_table
from tiering.cli import register
from tiering.reads import read_lake


def _tier_in_process(root: str, local_dir: str, table: str, index: int, count: int, rounds: int) -> None:
    conn = fl.connect(root, local_dir=local_dir)
    lake = Lake.for_connection(conn)
    for _ in range(rounds):
        tier_table(conn.get_table(table), lake, shard=Shard(index, count))


def test_shards_in_processes_tier_a_log_table_exactly_once(local, tmp_store, tmp_path) -> None:
    """Two shards tier in two processes while rows keep arriving; a last round of each catches up the tail."""
    conn, lake = local
    conn.create_table("d.ev", schema={"k": "INT", "v": "BIGINT"}, bucket_num=4, bucket_keys=["k"], options=LAKE_ON)
    ev = conn.get_table("d.ev")
    expected = [{"k": k, "v": 0} for k in range(30)]
    ev.append(expected)
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_tier_in_process, args=(tmp_store, str(tmp_path / f"p{i}"), "d.ev", i, 2, 3))
        for i in range(2)
    ]
    for p in procs:
        p.start()
    for r in range(1, 4):  # while the shards tier
        rows = [{"k": k, "v": r} for k in range(30)]
        ev.append(rows)
        expected += rows
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    for shard in Shard.all(2):
        tier_table(conn.get_table("d.ev"), lake, shard=shard)
    got = lake_rows(lake, "d.ev")
    assert sorted_rows(got, ["k", "v"]) == sorted_rows(fl_frame(expected), ["k", "v"])  # none lost, none twice
    assert dict(lake.snapshot("d.ev").offsets) == {(None, b): o for b, o in ev.end_offsets().items()}


def fl_frame(rows):
    return pl.DataFrame(rows)


def test_sharded_rounds_of_a_partitioned_primary_key_table_equal_the_live_state(local) -> None:
    conn, lake = local
    conn.create_table(
        "d.pk",
        schema={"day": "STRING", "k": "INT", "v": "BIGINT"},
        primary_key=["day", "k"],
        partition_keys=["day"],
        bucket_num=3,
        options=LAKE_ON,
    )
    pk = conn.get_table("d.pk")
    shards = Shard.all(3)
    for r, day in enumerate(["a", "b", "c"]):
        conn.create_partition("d.pk", {"day": day})
        pk.upsert([{"day": d, "k": k, "v": r} for d in ["a", "b", "c"][: r + 1] for k in range(12)])
        pk.delete([{"day": "a", "k": r}])
        if r == 2:
            conn.drop_partition("d.pk", {"day": "b"})
        for shard in shards[r % 3 :] + shards[: r % 3]:  # a different shard first every round
            report = tier_table(conn.get_table("d.pk"), lake, shard=shard)
            assert all(shard.owns(*k) or report.end_offsets[k] == report.start_offsets.get(k, 0)
                       for k in report.end_offsets)
    state = read_lake(lake, "d.pk").filter(pl.col("day") != "b").collect()  # the lake keeps dropped partitions
    live = pk.to_polars()
    assert sorted_rows(state, ["day", "k", "v"]) == sorted_rows(live, ["day", "k", "v"])
    snap = lake.snapshot("d.pk", "primary-key")
    assert dict(snap.offsets) == {k: o for k, o in _live_ends(pk).items()}


def _live_ends(table) -> dict:
    out = {}
    for part in table.partition_tables():
        out.update({(part.partition_name, b): o for b, o in part.end_offsets().items()})
    return out


def test_a_bad_shard_is_refused_before_anything_is_committed(local) -> None:
    conn, lake = local
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    conn.get_table("d.ev").append([{"v": 1}])
    with pytest.raises(fl.InvalidConfigError, match="Shard"):
        tier_table(conn.get_table("d.ev"), lake, shard=(0, 2))  # type: ignore[arg-type]
    assert lake.load("d.ev") is None or lake.snapshot("d.ev").offsets == {}


def _tier_cli(argv: list[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="fluss-lake")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["tier", *argv])
    out = io.StringIO()
    return args.func(args, out=out), out.getvalue()


def test_tier_cli_shard_option(local, tmp_store, capsys) -> None:
    conn, lake = local
    conn.create_table("d.ev", schema={"k": "INT"}, bucket_num=4, bucket_keys=["k"], options=LAKE_ON)
    conn.get_table("d.ev").append([{"k": k} for k in range(20)])
    for bad in ["2", "a/2", "2/2"]:
        assert _tier_cli(["--once", "--store", tmp_store, "--shard", bad])[0] == 2
        assert "error:" in capsys.readouterr().err
        assert lake.load("d.ev") is None  # refused before anything was tiered
    assert _tier_cli(["--once", "--store", tmp_store, "--shard", "1/2"])[0] == 0
    assert dict(lake.snapshot("d.ev").offsets) == {
        (None, b): (o if Shard(1, 2).owns(None, b) else 0) for b, o in conn.get_table("d.ev").end_offsets().items()
    }
    assert _tier_cli(["--once", "--store", tmp_store, "--shard", "0/2"])[0] == 0
    assert lake_rows(lake, "d.ev").height == 20


def test_a_sharded_service_waits_for_its_own_buckets_only(local) -> None:
    from tiering import TieringService

    conn, lake = local
    conn.create_table("d.ev", schema={"k": "INT"}, bucket_num=4, bucket_keys=["k"],
                      options={**LAKE_ON, "table.datalake.freshness": "1 s"})
    conn.get_table("d.ev").append([{"k": k} for k in range(20)])
    service = TieringService(conn, lake, shard=Shard(0, 2)).start()
    try:
        assert service.wait_until_caught_up(timeout_s=60)
    finally:
        service.stop()
    ends = conn.get_table("d.ev").end_offsets()
    assert dict(lake.snapshot("d.ev").offsets) == {(None, b): (o if b % 2 == 0 else 0) for b, o in ends.items()}
    assert service.lag()[conn.get_table("d.ev").path].total_offsets == sum(o for b, o in ends.items() if b % 2)
