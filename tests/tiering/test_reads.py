"""Union reads (lake snapshot + live tail), lake tables and history as LazyFrames, DuckDB views."""

from __future__ import annotations

import duckdb
import polars as pl
from tiering_helpers import LAKE_ON, lake_rows, sorted_rows

import fluss_lake as fl
from tiering import Lake, read_history, read_lake, register_duckdb, tier_once, union_read


def test_union_read_of_a_log_table_is_complete_and_fresh(store_and_lake):
    conn, lake = store_and_lake
    conn.create_table("d.ev", schema={"id": "INT", "s": "STRING"}, bucket_num=2, bucket_keys=["id"], options=LAKE_ON)
    ev = conn.get_table("d.ev")
    assert union_read(ev, lake).collect().height == 0  # nothing anywhere yet
    ev.append([{"id": i, "s": "old"} for i in range(10)])
    tier_once(conn, lake)
    ev.append([{"id": i, "s": "new"} for i in range(10, 15)])  # only live
    view = union_read(ev, lake).collect()
    assert sorted_rows(view, ["id", "s"]) == sorted_rows(ev.scan_log(), ["id", "s"])
    assert view.schema == pl.Schema({"id": pl.Int32, "s": pl.String})
    with_sys = union_read(ev, lake, system_columns=True).collect()
    assert with_sys.select("__bucket", "__offset").is_duplicated().sum() == 0 and with_sys.height == 15


def test_union_read_of_a_primary_key_table_is_the_current_state(store_and_lake):
    conn, lake = store_and_lake
    conn.create_table("d.kv", schema={"k": "INT", "v": "STRING", "n": "BIGINT"}, primary_key=["k"], bucket_num=3,
                      options=LAKE_ON)
    kv = conn.get_table("d.kv")
    kv.upsert([{"k": k, "v": f"v{k}", "n": k} for k in range(30)])
    tier_once(conn, lake)
    kv.upsert([{"k": 3, "v": "changed", "n": -3}, {"k": 100, "v": "new", "n": 100}])
    kv.delete([{"k": 4}, {"k": 5}])
    kv.upsert([{"k": 5, "n": 55}], target_columns=["k", "n"])  # re-inserted after the delete, partially
    view = union_read(kv, lake).collect()
    assert sorted_rows(view, ["k", "v", "n"]) == sorted_rows(kv.to_polars(), ["k", "v", "n"])
    assert view.height == 30 - 1 + 1 and view["k"].is_duplicated().sum() == 0
    projected = union_read(kv, lake, columns=["k", "n"]).filter(pl.col("k") == 3).collect()
    assert projected.to_dicts() == [{"k": 3, "n": -3}]


def test_union_read_stays_complete_after_log_ttl(local, tmp_path):
    clock = [0]
    conn = fl.connect(local[0].url, local_dir=str(tmp_path / "c"), clock=lambda: clock[0])
    lake = local[1]
    conn.create_table("d.ev", schema={"v": "INT"}, options={**LAKE_ON, "table.log.ttl": "1 h"})
    conn.create_table("d.kv", schema={"k": "INT", "v": "INT"}, primary_key=["k"], options={**LAKE_ON, "table.log.ttl": "1 h"})
    ev, kv = conn.get_table("d.ev"), conn.get_table("d.kv")
    for step in range(4):
        clock[0] = step * 3_600_000
        ev.append([{"v": step}])
        kv.upsert([{"k": step, "v": step}, {"k": 0, "v": 100 + step}])
        if step == 1:
            tier_once(conn, lake)  # the lake holds steps 0-1
    clock[0] = 5 * 3_600_000
    ev.expire_log(now_ms=clock[0])
    kv.expire_log(now_ms=clock[0])
    assert ev.earliest_offsets()[0] == 3  # steps 0-2 are gone from the live log, step 2 was never tiered
    assert union_read(ev, lake).collect()["v"].sort().to_list() == [0, 1, 3]  # step 2 expired before tiering
    assert sorted_rows(union_read(kv, lake).collect(), ["k", "v"]) == sorted_rows(kv.to_polars(), ["k", "v"])
    tier_once(conn, lake)
    ev.append([{"v": 4}])
    kv.upsert([{"k": 9, "v": 9}])
    assert union_read(ev, lake).collect()["v"].sort().to_list() == [0, 1, 3, 4]
    assert sorted_rows(union_read(kv, lake).collect(), ["k", "v"]) == sorted_rows(kv.to_polars(), ["k", "v"])


def test_lake_tables_and_history_read_as_lazy_frames(store_and_lake):
    conn, lake = store_and_lake
    conn.create_table("d.kv", schema={"k": "INT", "v": "STRING"}, primary_key=["k"], bucket_num=2, options=LAKE_ON)
    kv = conn.get_table("d.kv")
    kv.upsert([{"k": k, "v": "a"} for k in range(20)])
    kv.upsert([{"k": 1, "v": "b"}])
    kv.delete([{"k": 2}])
    tier_once(conn, lake)
    lazy = read_lake(lake, "d.kv")
    assert isinstance(lazy, pl.LazyFrame)
    assert lazy.filter(pl.col("k") < 3).select("k", "v").sort("k").collect().to_dicts() == [
        {"k": 0, "v": "a"}, {"k": 1, "v": "b"}]
    assert sorted_rows(lazy.collect(), ["k", "v", "__offset"]) == sorted_rows(lake_rows(lake, "d.kv"), ["k", "v", "__offset"])
    history = read_history(lake, "d.kv")
    assert isinstance(history, pl.LazyFrame)
    key1 = history.filter(pl.col("k") == 1).sort("__offset").select("__change_type", "v").collect().rows()
    assert key1 == [("+I", "a"), ("-U", "a"), ("+U", "b")]
    assert history.filter(pl.col("__change_type") == "-D").select("k").collect()["k"].to_list() == [2]
    assert history.collect_schema()["__timestamp"] == pl.Datetime("us", "UTC")
    assert history.collect().height == kv.scan_log().height
    # a column added live reads as null from older files
    conn.alter_table("d.kv", add_columns={"extra": "INT"})
    kv.upsert([{"k": 50, "v": "z", "extra": 5}])
    tier_once(conn, lake)
    assert read_lake(lake, "d.kv").filter(pl.col("k").is_in([0, 50])).select("k", "extra").sort("k").collect().rows() \
        == [(0, None), (50, 5)]


def test_duckdb_views_over_union_reads_and_history(local):
    conn, lake = local
    conn.create_table("d.ev", schema={"v": "BIGINT"}, options=LAKE_ON)
    conn.create_table("d.kv", schema={"k": "INT", "n": "BIGINT"}, primary_key=["k"], options=LAKE_ON)
    ev, kv = conn.get_table("d.ev"), conn.get_table("d.kv")
    ev.append([{"v": i} for i in range(10)])
    kv.upsert([{"k": 1, "n": 1}, {"k": 2, "n": 2}])
    tier_once(conn, lake)
    ev.append([{"v": 100}])
    kv.upsert([{"k": 1, "n": 10}])
    con = duckdb.connect()
    views = register_duckdb(con, lake, conn)
    assert sorted(views) == ["d.ev", "d.kv", "d.kv__history"]
    assert con.sql("select count(*), sum(v) from d.ev").fetchall() == [(11, 145)]
    assert con.sql("select k, n from d.kv order by k").fetchall() == [(1, 10), (2, 2)]
    assert con.sql('select count(*) from d."kv__history"').fetchall() == [(2,)]  # the live tail is not tiered yet
    lake_only = duckdb.connect()
    register_duckdb(lake_only, lake, tables=["d.ev"])
    assert lake_only.sql("select count(*) from d.ev").fetchall() == [(10,)]


def test_registering_a_lake_never_tiered_creates_nothing(tmp_path) -> None:
    conn = fl.connect(str(tmp_path / "live"))
    lake = Lake.local(tmp_path / "lake")
    assert register_duckdb(duckdb.connect(), lake, conn) == []
    assert not (tmp_path / "lake").exists()
