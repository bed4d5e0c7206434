"""Partitioned live tables in the lake: Iceberg identity partitions, offsets per (partition, bucket), partitions
created later, copy-on-write scoped to touched partitions, drops (kept by default, expired on request), union
reads and the history frame.

The lake is read back through pyiceberg itself (an independent reader) and compared with the live table.
"""

from __future__ import annotations

import datetime as dt
import json
import threading

import polars as pl
import pytest
from tiering_helpers import LAKE_ON, lake_rows, run_writer_with_tierers, sorted_rows

import fluss_lake as fl
from fluss_lake.exceptions import UnsupportedOperationError
from tiering import (
    Lake,
    read_history,
    read_lake,
    table_lag,
    tier_once,
    tier_table,
    union_read,
)


def _pk_table(conn: fl.Connection, path: str = "d.pk") -> fl.Table:
    conn.create_table(path, schema={"day": "STRING", "k": "INT", "v": "STRING"}, primary_key=["day", "k"],
                      partition_keys=["day"], bucket_num=2, options=LAKE_ON)
    return conn.get_table(path)


def _data_files(lake: Lake, path: str) -> set[str]:
    return {task.file.file_path for task in lake.load(path).scan().plan_files()}


def _offsets_entry(lake: Lake, path: str, kind: str = "log") -> dict:
    return json.loads(lake.load(path, kind).current_snapshot().summary.additional_properties["fluss-offsets"])


def test_partitions_map_to_iceberg_partitions_with_offsets_per_partition_and_bucket(store_and_lake):
    conn, lake = store_and_lake
    conn.create_table("d.ev", schema={"day": "DATE", "region": "STRING", "v": "INT"},
                      partition_keys=["day", "region"], bucket_num=2, options=LAKE_ON)
    ev, pk = conn.get_table("d.ev"), _pk_table(conn)
    ev.append([{"day": dt.date(2026, 1, 1), "region": "eu", "v": i} for i in range(5)]
              + [{"day": dt.date(2026, 1, 2), "region": "us", "v": 10}])
    pk.upsert([{"day": "a", "k": i, "v": "x"} for i in range(6)] + [{"day": "b", "k": 1, "v": "y"}])
    tier_once(conn, lake)

    for path, columns in (("d.ev", ["day", "region", "__bucket"]), ("d.pk", ["day", "__bucket"])):
        spec = lake.load(path).spec()
        assert [f.name for f in spec.fields] == columns
        assert {str(f.transform) for f in spec.fields} == {"identity"}
    assert [f.name for f in lake.load("d.pk", "history").spec().fields] == ["day", "__bucket"]
    entry = _offsets_entry(lake, "d.ev")
    assert {(p, b): o for p, b, o in entry["offsets"]} == ev.end_offsets()
    assert set(entry["offsets"][0][0].split("$")) <= {"2026-01-01", "2026-01-02", "eu", "us"}
    assert entry["partitions"] == {p.name: p.partition_id for p in ev.list_partitions()}
    # every data file sits in one Iceberg partition: (day, region, bucket)
    files = [t.file for t in lake.load("d.ev").scan().plan_files()]
    assert {(f.partition[0], f.partition[1]) for f in files} == {(20454, "eu"), (20455, "us")}  # days since epoch
    rows = lake_rows(lake, "d.ev")
    live = ev.scan_log().rename({"_bucket": "__bucket", "_offset": "__offset"})
    cols = ["day", "region", "__bucket", "__offset", "v"]
    assert sorted_rows(rows, cols) == sorted_rows(live, cols)

    # a partition created after the first round is picked up; offsets stay per partition
    ev.append([{"day": dt.date(2026, 1, 3), "region": "eu", "v": 7}])
    pk.upsert([{"day": "c", "k": 9, "v": "z"}])
    reports = {str(r.table): r for r in tier_once(conn, lake)}
    assert reports["d.ev"].rows == 1 and reports["d.pk"].rows == 1
    assert set(reports["d.pk"].end_offsets) == set(pk.end_offsets())
    assert dict(lake.snapshot("d.ev").offsets) == ev.end_offsets()
    assert dict(lake.snapshot("d.pk").offsets) == dict(lake.snapshot("d.pk", "history").offsets) == pk.end_offsets()
    assert sorted_rows(lake_rows(lake, "d.ev"), ["day", "region", "v"]) == sorted_rows(ev.to_polars(), ["day", "region", "v"])
    assert sorted_rows(lake_rows(lake, "d.pk"), ["day", "k", "v"]) == sorted_rows(pk.to_polars(), ["day", "k", "v"])
    assert tier_once(conn, lake)[0].committed is False  # nothing new: no commit
    lag = table_lag(pk, lake)
    assert set(lag.offsets_behind) == set(pk.end_offsets()) and lag.total_offsets == 0
    pk.upsert([{"day": "d", "k": 1, "v": "w"}, {"day": "a", "k": 0, "v": "w"}])
    lag = table_lag(pk, lake)
    assert lag.total_offsets == 3 and {k for k, o in lag.offsets_behind.items() if o}.issubset(pk.end_offsets())


def test_primary_key_changes_delete_only_in_the_touched_partitions(local):
    conn, lake = local
    pk = _pk_table(conn)
    for day in ("a", "b", "c"):
        pk.upsert([{"day": day, "k": i, "v": "x"} for i in range(20)])
        tier_once(conn, lake)  # one round per partition: files of a, b, c written separately
    before = _data_files(lake, "d.pk")
    pk.upsert([{"day": "b", "k": 3, "v": "NEW"}])
    pk.delete([{"day": "b", "k": 4}])
    report = tier_once(conn, lake)[0]
    after = _data_files(lake, "d.pk")
    assert before <= after and report.files_rewritten == 0  # merge-on-read: nothing rewritten
    assert report.position_deletes == 2 and report.delete_files >= 1
    tasks = list(lake.load("d.pk").scan().plan_files())
    delete_paths = {d.file_path for t in tasks for d in t.delete_files}
    assert len(delete_paths) == report.delete_files and all("/day=b/" in p for p in delete_paths)
    assert all("/day=b/" in t.file.file_path for t in tasks if t.delete_files)
    assert sorted_rows(lake_rows(lake, "d.pk"), ["day", "k", "v"]) == sorted_rows(pk.to_polars(), ["day", "k", "v"])


def test_a_dropped_partition_stays_in_the_lake_unless_expired_and_a_recreated_one_starts_over(local):
    conn, lake = local
    pk = _pk_table(conn)
    pk.upsert([{"day": "a", "k": 1, "v": "a1"}, {"day": "b", "k": 1, "v": "b1"}, {"day": "b", "k": 2, "v": "b2"}])
    tier_once(conn, lake)
    old_id = pk.partition("b").partition_info.partition_id
    pk.drop_partition("b")
    report = tier_once(conn, lake)[0]
    # default: the lake keeps the dropped partition's rows and history (Fluss writes no deletes on drop)
    assert sorted(lake_rows(lake, "d.pk")["v"].to_list()) == ["a1", "b1", "b2"]
    assert lake_rows(lake, "d.pk", "history").filter(pl.col("day") == "b").height == 2
    for kind in ("log", "history"):  # its offsets left both summaries
        assert all(k[0] != "b" for k in lake.snapshot("d.pk", kind).offsets)
    assert report.committed
    # union read: the lake-only partition is read from the lake (as Fluss's union read)
    assert sorted(union_read(pk, lake).collect()["v"].to_list()) == ["a1", "b1", "b2"]

    # re-created under the same name: a new incarnation from offset 0, no "lake ahead of live" error
    pk.upsert([{"day": "b", "k": 2, "v": "b2-new"}])
    assert pk.partition("b").partition_info.partition_id != old_id
    tier_once(conn, lake)
    assert dict(lake.snapshot("d.pk").offsets) == pk.end_offsets()
    assert sorted(read_lake(lake, "d.pk").collect()["v"].to_list()) == ["a1", "b1", "b2-new"]
    assert sorted(union_read(pk, lake).collect()["v"].to_list()) == ["a1", "b1", "b2-new"]

    # opt in: expire the lake data of partitions dropped live (state and history), in one commit each
    pk.drop_partition("b")
    reports = tier_once(conn, lake, expire_partitions=True)
    assert reports[0].table == pk.path
    assert lake_rows(lake, "d.pk")["v"].to_list() == ["a1"]
    assert set(lake_rows(lake, "d.pk", "history")["day"].to_list()) == {"a"}
    assert lake.expire_partitions(pk) == []  # idempotent
    assert union_read(pk, lake).collect()["v"].to_list() == ["a1"]


def test_union_read_of_partitioned_tables_is_lake_plus_the_live_tail_per_partition(store_and_lake):
    conn, lake = store_and_lake
    conn.create_table("d.ev", schema={"day": "INT", "v": "INT"}, partition_keys=["day"], bucket_num=2, options=LAKE_ON)
    ev, pk = conn.get_table("d.ev"), _pk_table(conn)
    ev.append([{"day": 1, "v": 1}, {"day": 2, "v": 2}])
    pk.upsert([{"day": "a", "k": i, "v": "x"} for i in range(4)] + [{"day": "b", "k": 0, "v": "y"}])
    tier_once(conn, lake)
    ev.append([{"day": 2, "v": 3}, {"day": 3, "v": 4}])  # tail in an old and in a new partition
    pk.upsert([{"day": "a", "k": 1, "v": "tail"}, {"day": "c", "k": 0, "v": "new"}])
    pk.delete([{"day": "b", "k": 0}])
    assert sorted(union_read(ev, lake).collect()["v"].to_list()) == [1, 2, 3, 4]
    got = union_read(pk, lake, system_columns=True).collect()
    assert sorted_rows(got, ["day", "k", "v"]) == sorted_rows(pk.to_polars(), ["day", "k", "v"])
    assert got.filter(pl.col("v") == "tail")["__offset"].to_list() != [-1]
    # the lake alone is behind: the tail really came from the live log
    assert "tail" not in read_lake(lake, "d.pk").collect()["v"].to_list()


def test_history_of_a_partitioned_table_has_partition_names_and_feeds_training(local):
    from fluss_lake.training import history_of, state_as_of

    conn, lake = local
    pk = _pk_table(conn)
    pk.upsert([{"day": "a", "k": 1, "v": "1"}, {"day": "b", "k": 1, "v": "2"}])
    pk.upsert([{"day": "a", "k": 1, "v": "3"}])
    tier_once(conn, lake)
    pk.delete([{"day": "b", "k": 1}])
    history = read_history(lake, "d.pk").collect()
    assert history.columns == ["day", "k", "v", "__change_type", "__partition", "__bucket", "__offset", "__timestamp"]
    assert set(history["__partition"].to_list()) == {"a", "b"}
    full = history_of(pk, lake=read_history(lake, "d.pk")).collect()
    live_only = history_of(pk).collect()
    order = ["__partition", "__bucket", "__offset"]
    assert full.sort(order).equals(live_only.sort(order))
    assert full.filter(pl.col("__change_type") == "-D")["__partition"].to_list() == ["b"]
    ends = pk.end_offsets()
    assert state_as_of(full, primary_key=["day", "k"], offsets=ends).collect().to_dicts() == \
        [{"day": "a", "k": 1, "v": "3"}]
    before_delete = {**ends, ("b", next(b for (p, b) in ends if p == "b" and ends[(p, b)] > 0)): 1}
    assert state_as_of(full, primary_key=["day", "k"], offsets=before_delete).collect()["v"].to_list() == ["3", "2"]
    with pytest.raises(fl.InvalidConfigError, match="partition name, bucket"):
        state_as_of(full, primary_key=["day", "k"], offsets={0: 1})


def test_bad_input_on_partitioned_tables_is_refused_and_changes_nothing(local):
    conn, lake = local
    pk = _pk_table(conn)
    pk.upsert([{"day": "a", "k": 1, "v": "x"}])
    with pytest.raises(UnsupportedOperationError, match="whole table"):
        tier_table(pk.partition("a"), lake)
    assert lake.load("d.pk") is None  # nothing created
    tier_once(conn, lake)
    snapshot = lake.load("d.pk").current_snapshot().snapshot_id
    from fluss_lake.training import history_of

    with pytest.raises(UnsupportedOperationError, match="whole table"):
        history_of(pk.partition("a"))
    with pytest.raises(fl.SchemaMismatchError, match="partition column"):
        history_of(pk, lake=read_history(lake, "d.pk").drop("day", "__partition"))
    assert lake.load("d.pk").current_snapshot().snapshot_id == snapshot
    assert pk.to_polars()["v"].to_list() == ["x"]


def test_concurrent_tiering_of_a_partitioned_table_with_new_partitions_keeps_exactly_once(local):
    conn, lake = local
    conn.create_table("d.pl", schema={"day": "STRING", "v": "BIGINT"}, partition_keys=["day"], bucket_num=2,
                      bucket_keys=["v"], options=LAKE_ON)
    _pk_table(conn)
    stop = threading.Event()
    errors: list[BaseException] = []
    written = [0]

    def writer() -> None:
        log, pk = conn.get_table("d.pl"), conn.get_table("d.pk")
        i = 0
        while not stop.is_set():
            day = f"p{i // 40}"  # new partitions keep appearing
            log.append([{"day": day, "v": i}, {"day": day, "v": i + 1}])
            pk.upsert([{"day": day, "k": i % 7, "v": str(i)}])
            i += 2
            written[0] = i
            stop.wait(0.01)

    def tierer(seed: int) -> None:
        own = fl.connect(conn.url, local_dir=str(conn.local_dir) + f"-t{seed}")
        try:
            rounds = 0
            while (rounds < 4 or written[0] < 82) and rounds < 200:  # on until a third partition appeared
                tier_once(own, Lake(lake.properties))
                rounds += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_writer_with_tierers(writer, tierer, stop, tierers=2)
    assert not errors, errors
    tier_once(conn, lake)
    log, pk = conn.get_table("d.pl"), conn.get_table("d.pk")
    lake_log = lake_rows(lake, "d.pl")
    assert lake_log.select("day", "__bucket", "__offset").is_duplicated().sum() == 0
    live_log = log.scan_log().rename({"_bucket": "__bucket", "_offset": "__offset"})
    assert sorted_rows(lake_log, ["day", "__bucket", "__offset", "v"]) == sorted_rows(live_log, ["day", "__bucket", "__offset", "v"])
    assert sorted_rows(lake_rows(lake, "d.pk"), ["day", "k", "v"]) == sorted_rows(pk.to_polars(), ["day", "k", "v"])
    assert lake_rows(lake, "d.pk", "history").height == pk.scan_log().height
    assert dict(lake.snapshot("d.pl").offsets) == log.end_offsets()
    assert len(log.list_partitions()) >= 2
