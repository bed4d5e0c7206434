"""DuckDB views over live tables, changelogs, lake tables and union reads: nothing copied at registration, each
query reads the data as of then, with projection and filters pushed into the scans."""

from __future__ import annotations

from typing import Any

import duckdb
import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.exceptions import InvalidConfigError, TableNotExistError
from tiering import Lake, register_duckdb, tier_once, union_read
from tiering.lazy_reads import scan_lake, scan_union

LAKE_ON = {"table.datalake.enabled": True}


def _lake(kind: str, conn: fl.Connection, request: pytest.FixtureRequest, tmp_path: Any) -> Lake:
    if kind == "local":
        return Lake.for_connection(conn)
    endpoint = request.getfixturevalue("moto_endpoint")
    url = request.getfixturevalue("s3_url")[0]
    return Lake({"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                 "warehouse": f"s3://{url.split('/')[2]}/warehouse", "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
                 "s3.endpoint": endpoint, "s3.access-key-id": "testing", "s3.secret-access-key": "testing",
                 "s3.region": "us-east-1"})


@pytest.mark.parametrize("where", ["local", "s3"])
def test_views_join_live_and_lake_tables_and_follow_every_write(tmp_path, request, decodes, where):
    conn = fl.connect(str(tmp_path / "live"))
    conn.create_database("shop")
    conn.create_table("shop.orders", schema={"id": "INT", "user_id": "INT", "amount": "DOUBLE"}, bucket_num=2,
                      options={**LAKE_ON, "table.statistics.columns": "id"})
    conn.create_table("shop.users", schema={"user_id": "INT", "name": "STRING"}, primary_key=["user_id"],
                      bucket_num=2, options=LAKE_ON)
    conn.create_table("shop.clicks", schema={"user_id": "INT", "page": "STRING"})  # live only, never tiered
    orders, users, clicks = (conn.get_table(f"shop.{n}") for n in ("orders", "users", "clicks"))
    lake = _lake(where, conn, request, tmp_path)
    orders.append([{"id": i, "user_id": i % 3, "amount": float(i)} for i in range(30)])
    users.upsert([{"user_id": u, "name": f"u{u}"} for u in range(3)])
    tier_once(conn, lake)
    orders.append([{"id": 30 + i, "user_id": i % 3, "amount": 100.0} for i in range(3)])  # live tail only
    users.upsert([{"user_id": 1, "name": "renamed"}])
    clicks.append([{"user_id": 1, "page": "home"}, {"user_id": 2, "page": "cart"}])

    decodes.calls.clear()  # count from here
    con = duckdb.connect()
    views = register_duckdb(con, lake, conn, live=True)
    assert sorted(views) == ["shop.clicks", "shop.clicks$changelog", "shop.orders", "shop.orders$changelog",
                             "shop.users", "shop.users$changelog", "shop.users__history"]
    assert decodes.calls == []  # registering read no live batch

    join = """select u.name, count(*) as n, sum(o.amount) as total from shop.orders o join shop.users u using (user_id)
              join shop.clicks c using (user_id) group by u.name order by u.name"""
    expected = (
        union_read(orders, lake).collect().join(union_read(users, lake).collect(), on="user_id")
        .join(clicks.to_polars(), on="user_id").group_by("name").agg(pl.len().alias("n"), pl.col("amount").sum())
        .sort("name").rows()
    )
    assert con.sql(join).fetchall() == [(name, n, total) for name, n, total in expected]
    assert con.sql(join).fetchall() == [("renamed", 11, 245.0), ("u2", 11, 255.0)]

    # a write after registering is in the next query of the same view, live and through the lake
    clicks.append([{"user_id": 0, "page": "home"}])
    users.delete([{"user_id": 2}])
    assert con.sql(join).fetchall() == [("renamed", 11, 245.0), ("u0", 11, 235.0)]
    tier_once(conn, lake)
    orders.append([{"id": 99, "user_id": 0, "amount": 1.0}])
    assert con.sql("select count(*), max(id) from shop.orders").fetchall() == [(34, 99)]
    assert con.sql('select _change_type, count(*) from shop."users$changelog" group by 1 order by 1').fetchall() == [
        ("delete", 1), ("insert", 3), ("update_after", 1), ("update_before", 1)]
    assert con.sql('select count(*) from shop."users__history"').fetchall() == [(6,)]  # tiered after the delete

    # projection and filters reach the live scan: only the columns used are decoded
    decodes.calls.clear()
    assert con.sql("select page from shop.clicks where user_id = 0").fetchall() == [("home",)]
    assert decodes.calls and all(c == ["user_id", "page"] for c in decodes.calls)
    decodes.calls.clear()
    assert con.sql("select amount from shop.orders where id = 99").fetchall() == [(1.0,)]
    # the union view reads the lake by Parquet, and of the live tail only the un-tiered batch, only these columns
    assert decodes.calls == [["id", "amount"]]


def test_registration_reads_nothing_and_lake_tables_plan_per_query(tmp_path, monkeypatch):
    conn = fl.connect(str(tmp_path / "live"))
    conn.create_database("d")
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    ev = conn.get_table("d.ev")
    for j in range(5):
        ev.append([{"v": j * 10 + i} for i in range(10)])
    lake = Lake.for_connection(conn)
    tier_once(conn, lake)
    planned: list[int] = []
    import tiering.lazy_reads as lazy_reads_module

    original = lazy_reads_module.read_lake
    monkeypatch.setattr(lazy_reads_module, "read_lake", lambda *a, **k: planned.append(1) or original(*a, **k))
    con = duckdb.connect()
    assert register_duckdb(con, lake, tables=["d.ev"]) == ["d.ev"]
    assert planned == []  # registering planned no files
    assert con.sql("select count(*) from d.ev where v >= 25").fetchall() == [(25,)]
    ev.append([{"v": 1000}])
    tier_once(conn, lake)
    assert con.sql("select count(*), max(v) from d.ev").fetchall() == [(51, 1000)]  # the new lake snapshot
    assert len(planned) == 2


def test_lake_only_and_never_tiered_registrations(tmp_path, decodes):
    conn = fl.connect(str(tmp_path / "live"))
    conn.create_database("d")
    conn.create_table("d.ev", schema={"v": "INT", "s": "STRING"}, options={"table.statistics.columns": "v"})
    for j in range(4):
        conn.get_table("d.ev").append([{"v": 10 * j + i, "s": f"s{j}"} for i in range(10)])
    lake = Lake.local(tmp_path / "lake")
    assert register_duckdb(duckdb.connect(), lake, conn) == []  # as before: a lake never tiered, no views
    con = duckdb.connect()
    assert register_duckdb(con, lake, conn, live=True) == ["d.ev", "d.ev$changelog"]
    assert not (tmp_path / "lake").exists()  # still no empty catalog
    decodes.calls.clear()  # count from here
    assert con.sql("select s from d.ev where v = 21").fetchall() == [("s2",)]
    assert decodes.calls == [["v", "s"]]  # DuckDB's filter reached the batch statistics: 3 of 4 batches unread
    assert con.sql('select count(*) from d."ev$changelog" where _change_type = \'insert\'').fetchall() == [(40,)]
    with pytest.raises(TableNotExistError, match="tier it first"):
        scan_lake(lake, "d.ev")
    with pytest.raises(InvalidConfigError, match=r"unknown column\(s\) \['nope'\]"):
        scan_union(conn.get_table("d.ev"), lake, columns=["nope"])
    assert conn.get_table("d.ev").to_polars().height == 40


def test_union_scan_has_the_union_reads_schema(tmp_path):
    conn = fl.connect(str(tmp_path / "live"))
    conn.create_database("d")
    conn.create_table("d.kv", schema={"k": "INT", "v": "STRING"}, primary_key=["k"], options=LAKE_ON)
    kv = conn.get_table("d.kv")
    kv.upsert([{"k": 1, "v": "a"}, {"k": 2, "v": "b"}])
    lake = Lake.for_connection(conn)
    tier_once(conn, lake)
    kv.delete([{"k": 2}])
    for options in ({}, {"system_columns": True}, {"columns": ["v"]}):
        lazy = scan_union(kv, lake, **options)
        eager = union_read(kv, lake, **options).collect()
        assert lazy.collect_schema() == eager.schema
        assert lazy.collect().sort(pl.all()).equals(eager.sort(pl.all()))
    assert scan_union(kv, lake).filter(pl.col("v") == "a").collect().rows() == [(1, "a")]
