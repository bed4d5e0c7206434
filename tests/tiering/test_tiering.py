"""Tiering rounds: log tables append, primary-key tables keep current state + history, exactly once.

Every check reads the lake back through pyiceberg itself (not through our readers) and compares it with the
live table: rows, offsets, system columns, snapshot summaries.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from decimal import Decimal

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFileContent
from tiering_helpers import LAKE_ON, lake_rows, run_writer_with_tierers, sorted_rows

import fluss_lake as fl
from tiering import Lake, LakeSnapshot, read_lake, tier_once, tier_table
from fluss_lake.keys.bucketing import buckets_of


def _log_keyed(frame: pl.DataFrame) -> pl.DataFrame:
    """A live log scan in the lake's naming, for comparisons."""
    return frame.rename({"_bucket": "__bucket", "_offset": "__offset"})


def test_log_table_tiers_every_row_once(store_and_lake):
    conn, lake = store_and_lake
    conn.create_table("d.ev", schema={"id": "BIGINT", "s": "STRING"}, bucket_num=3, bucket_keys=["id"], options=LAKE_ON)
    ev = conn.get_table("d.ev")
    ev.append([{"id": i, "s": f"a{i}"} for i in range(50)])
    ev.append([{"id": i, "s": f"b{i}"} for i in range(50, 80)])
    first = tier_table(ev, lake)
    assert first.committed and first.rows == 80 and dict(first.end_offsets) == ev.end_offsets()
    again = tier_table(ev, lake)
    assert not again.committed and again.rows == 0 and again.snapshot_id == first.snapshot_id

    ev.append([{"id": i, "s": f"c{i}"} for i in range(80, 100)])
    assert tier_table(ev, lake).rows == 20
    lake_frame = lake_rows(lake, "d.ev")
    live = _log_keyed(ev.scan_log())
    assert lake_frame.height == 100 and lake_frame.select("__bucket", "__offset").is_duplicated().sum() == 0
    cols = ["__bucket", "__offset", "id", "s"]
    assert sorted_rows(lake_frame, cols) == sorted_rows(live, cols)
    # __timestamp is the live commit time (micros in Iceberg)
    joined = lake_frame.join(live, on=["__bucket", "__offset"])
    assert (joined["__timestamp"] == joined["_commit_timestamp"].cast(pl.Datetime("us", "UTC"))).all()
    # offsets live in the summary of the snapshot that added the data
    snapshot = lake.load("d.ev").current_snapshot()
    body = json.loads(snapshot.summary["fluss-offsets"])
    assert {b: o for _, b, o in body["offsets"]} == ev.end_offsets() and body["table_id"] == ev.info.table_id
    assert snapshot.summary["added-records"] == "20"


def test_primary_key_table_current_state_and_history(store_and_lake):
    conn, lake = store_and_lake
    conn.create_table("d.users", schema={"id": "INT", "name": "STRING", "visits": "BIGINT"}, primary_key=["id"],
                      bucket_num=4, options=LAKE_ON)
    users = conn.get_table("d.users")
    users.upsert([{"id": i, "name": f"u{i}", "visits": 0} for i in range(40)])
    tier_table(users, lake)
    users.upsert([{"id": i, "visits": 5} for i in range(0, 40, 3)], target_columns=["id", "visits"])  # partial
    users.delete([{"id": 1}, {"id": 2}])
    users.upsert([{"id": 7, "name": "seven", "visits": 1}, {"id": 7, "name": "SEVEN", "visits": 2}])
    users.upsert([{"id": 100, "name": "new", "visits": 9}])
    report = tier_table(users, lake)
    assert report.committed and report.rows == users.scan_log(start_offsets=report.start_offsets).height

    cols = ["id", "name", "visits"]
    state = lake_rows(lake, "d.users")
    assert sorted_rows(state, cols) == sorted_rows(users.to_polars(), cols)
    assert state.select("id").is_duplicated().sum() == 0
    history = lake_rows(lake, "d.users", "history")
    changelog = _log_keyed(users.scan_log()).with_columns(pl.col("_change_type").cast(pl.String).alias("__change_type"))
    hcols = ["__bucket", "__offset", "__change_type", *cols]
    assert sorted_rows(history, hcols) == sorted_rows(changelog, hcols)
    assert set(history["__change_type"]) == {"+I", "-U", "+U", "-D"}
    # the state row of each key carries the offset of its latest change
    latest = changelog.filter(pl.col("__change_type") != "-U").group_by("id").agg(pl.col("__offset").max())
    assert sorted_rows(state, ["id", "__offset"]) == sorted_rows(
        latest.join(users.to_polars(), on="id", how="semi"), ["id", "__offset"])
    # the Iceberg table is partitioned by __bucket and declares the primary key as identifier fields
    iceberg = lake.load("d.users")
    assert [f.name for f in iceberg.spec().fields] == ["__bucket"]
    assert [iceberg.schema().find_field(i).name for i in iceberg.schema().identifier_field_ids] == ["id"]
    assert iceberg.properties["commit.retry.num-retries"] == "0"


def test_changes_write_position_deletes_only_in_the_partitions_they_touch(local):
    conn, lake = local
    conn.create_table("d.kv", schema={"k": "BIGINT", "v": "BIGINT"}, primary_key=["k"], bucket_num=4, options=LAKE_ON)
    kv = conn.get_table("d.kv")
    kv.upsert(pl.DataFrame({"k": range(400), "v": range(400)}))
    tier_table(kv, lake)
    before = {t.file.file_path for t in lake.load("d.kv").scan().plan_files()}
    assert len(before) == 4  # one file per bucket partition
    bucket_of_5 = int(buckets_of(kv.info, pl.DataFrame({"k": [5]}))[0])
    kv.upsert([{"k": 5, "v": -5}])
    report = tier_table(kv, lake)
    assert (report.files_rewritten, report.position_deletes, report.delete_files) == (0, 1, 1)
    tasks = list(lake.load("d.kv").scan().plan_files())
    assert before <= {t.file.file_path for t in tasks}  # merge-on-read: no data file was rewritten
    [new_file] = [t for t in tasks if t.file.file_path not in before]
    assert new_file.file.partition[0] == bucket_of_5 and new_file.file.record_count == 1
    # the one delete file sits in bucket_of_5's partition and deletes k=5's old position in that bucket's file
    with_deletes = [t for t in tasks if t.delete_files]
    assert [t.file.partition[0] for t in with_deletes] == [bucket_of_5]
    [delete_file] = with_deletes[0].delete_files
    assert delete_file.content == DataFileContent.POSITION_DELETES and delete_file.partition[0] == bucket_of_5
    positions = pq.read_table(delete_file.file_path.removeprefix("file://")).to_pylist()
    old_keys = pq.read_table(with_deletes[0].file.file_path.removeprefix("file://"), columns=["k"])["k"].to_pylist()
    assert [(r["file_path"], old_keys[r["pos"]]) for r in positions] == [(with_deletes[0].file.file_path, 5)]
    assert sorted_rows(lake_rows(lake, "d.kv"), ["k", "v"]) == sorted_rows(kv.to_polars(), ["k", "v"])
    assert sorted_rows(read_lake(lake, "d.kv").collect(), ["k", "v"]) == sorted_rows(kv.to_polars(), ["k", "v"])
    # a round of pure inserts into one bucket deletes nothing at all
    fresh_key = next(k for k in range(1000, 2000) if int(buckets_of(kv.info, pl.DataFrame({"k": [k]}))[0]) == 0)
    kv.upsert([{"k": fresh_key, "v": 1}])
    report = tier_table(kv, lake)
    assert (report.files_rewritten, report.position_deletes, report.delete_files) == (0, 0, 0)
    assert lake_rows(lake, "d.kv").height == 401


def test_aggregation_and_first_row_engines_tier_their_merged_rows(local):
    conn, lake = local
    conn.create_table("d.spend", schema={"u": "INT", "total": "BIGINT", "top": "DOUBLE"}, primary_key=["u"],
                      bucket_num=2, options={**LAKE_ON, "table.merge-engine": "aggregation",
                                             "fields.total.agg": "sum", "fields.top.agg": "max"})
    conn.create_table("d.first", schema={"u": "INT", "ch": "STRING"}, primary_key=["u"],
                      options={**LAKE_ON, "table.merge-engine": "first_row"})
    spend, first = conn.get_table("d.spend"), conn.get_table("d.first")
    for round_ in range(3):
        spend.upsert([{"u": u, "total": round_ + u, "top": float(round_ * u)} for u in range(5)])
        first.upsert([{"u": u, "ch": f"c{round_}"} for u in range(round_ + 2)])
        tier_once(conn, lake)
    assert sorted_rows(lake_rows(lake, "d.spend"), ["u", "total", "top"]) == sorted_rows(spend.to_polars(), ["u", "total", "top"])
    assert sorted_rows(lake_rows(lake, "d.first"), ["u", "ch"]) == sorted_rows(first.to_polars(), ["u", "ch"])


def test_types_map_to_iceberg_as_fluss_does(local):
    conn, lake = local
    schema = {"k": "INT", "t8": "TINYINT", "t16": "SMALLINT", "b": "BIGINT", "f": "FLOAT", "d": "DOUBLE",
              "dec": "DECIMAL(10,2)", "s": "STRING", "by": "BYTES", "day": "DATE", "tm": "TIME",
              "ts": "TIMESTAMP(3)", "ltz": "TIMESTAMP_LTZ(6)", "ok": "BOOLEAN", "arr": pl.List(pl.Int32),
              "row": pl.Struct({"x": pl.Int64, "y": pl.String})}
    conn.create_table("d.types", schema=schema, primary_key=["k"], options=LAKE_ON)
    table = conn.get_table("d.types")
    row = {"k": 1, "t8": -3, "t16": 300, "b": 2**40, "f": 1.5, "d": 2.25, "dec": Decimal("12.34"), "s": "x",
           "by": b"\x00\x01", "day": dt.date(2026, 11, 29), "tm": dt.time(12, 30, 1),
           "ts": dt.datetime(2026, 11, 29, 8, 0, 0, 123000),
           "ltz": dt.datetime(2026, 11, 29, 8, 0, 0, 123456, tzinfo=dt.UTC), "ok": True,
           "arr": [1, 2], "row": {"x": 1, "y": "z"}}
    table.upsert(pl.DataFrame([row], schema=table.schema.polars_schema))
    tier_table(table, lake)
    iceberg = lake.load("d.types")
    types = {f.name: str(f.field_type) for f in iceberg.schema().fields}
    assert types["t8"] == types["t16"] == types["k"] == "int" and types["b"] == "long"
    assert types["f"] == "float" and types["d"] == "double" and types["dec"] == "decimal(10, 2)"
    assert types["s"] == "string" and types["by"] == "binary" and types["day"] == "date" and types["tm"] == "time"
    assert types["ts"] == "timestamp" and types["ltz"] == "timestamptz" and types["ok"] == "boolean"
    assert types["arr"].startswith("list<int>") and types["row"].startswith("struct<")
    assert [f.name for f in iceberg.schema().fields][-3:] == ["__bucket", "__offset", "__timestamp"]
    assert {f.name: f.required for f in iceberg.schema().fields if f.name.startswith("__")} == dict.fromkeys(
        ["__bucket", "__offset", "__timestamp"], True)
    got = pl.from_arrow(iceberg.scan().to_arrow()).to_dicts()[0]
    for name in ("t8", "t16", "b", "f", "d", "dec", "s", "by", "day", "tm", "ok", "arr", "row"):
        assert got[name] == row[name], name
    assert got["ts"] == row["ts"] and got["ltz"] == row["ltz"]


def test_a_column_added_live_is_added_in_the_lake_on_the_next_round(store_and_lake):
    conn, lake = store_and_lake
    conn.create_table("d.pk", schema={"k": "INT", "v": "STRING"}, primary_key=["k"], bucket_num=2, options=LAKE_ON)
    conn.create_table("d.lg", schema={"v": "INT"}, options=LAKE_ON)
    pk, lg = conn.get_table("d.pk"), conn.get_table("d.lg")
    pk.upsert([{"k": 1, "v": "a"}, {"k": 2, "v": "b"}])
    lg.append([{"v": 1}])
    tier_once(conn, lake)
    conn.alter_table("d.pk", add_columns={"score": "DOUBLE"})
    conn.alter_table("d.lg", add_columns={"tag": "STRING"})
    pk.upsert([{"k": 2, "v": "b2", "score": 0.5}])
    lg.append([{"v": 2, "tag": "t"}])
    tier_once(conn, lake)
    for path, kind in (("d.pk", "log"), ("d.pk", "history"), ("d.lg", "log")):
        names = [f.name for f in lake.load(path, kind).schema().fields]
        new = "score" if path == "d.pk" else "tag"
        assert names.index(new) == names.index("__change_type" if kind == "history" else "__bucket") - 1, names
    assert sorted_rows(lake_rows(lake, "d.pk"), ["k", "v", "score"]) == [
        {"k": 1, "v": "a", "score": None}, {"k": 2, "v": "b2", "score": 0.5}]
    assert sorted_rows(lake_rows(lake, "d.lg"), ["v", "tag"]) == [{"v": 1, "tag": None}, {"v": 2, "tag": "t"}]


def test_a_stale_commit_is_refused_and_never_regresses_offsets(local):
    """pyiceberg would silently rebase a stale commit (default retries); lake tables refuse it."""
    from pyiceberg.exceptions import CommitFailedException

    conn, lake = local
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    ev = conn.get_table("d.ev")
    ev.append([{"v": 1}])
    tier_table(ev, lake)
    stale = Lake(lake.properties).load("d.ev")  # another process loaded the table at offset 1
    ev.append([{"v": 2}, {"v": 3}])
    tier_table(ev, lake)
    assert lake.snapshot("d.ev").offset(0) == 3
    regress = LakeSnapshot(None, {(None, 0): 1}, ev.info.table_id)
    with pytest.raises(CommitFailedException), stale.transaction() as tx:
        tx.append(pa.table({"v": pa.array([9], pa.int32()), "__bucket": pa.array([0], pa.int32()),
                            "__offset": [1], "__timestamp": pa.array([0], pa.timestamp("us", "UTC"))},
                           schema=stale.schema().as_arrow()), snapshot_properties=regress.summary_properties())
    assert lake.snapshot("d.ev").offset(0) == 3
    assert sorted(lake_rows(lake, "d.ev")["v"].to_list()) == [1, 2, 3]


def test_concurrent_tiering_runs_with_writers_keep_exactly_once(local):
    conn, lake = local
    conn.create_table("d.ev", schema={"v": "BIGINT"}, bucket_num=2, bucket_keys=["v"], options=LAKE_ON)
    conn.create_table("d.kv", schema={"k": "BIGINT", "n": "BIGINT"}, primary_key=["k"], bucket_num=2,
                      options={**LAKE_ON, "table.merge-engine": "aggregation", "fields.n.agg": "sum"})
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        ev, kv = conn.get_table("d.ev"), conn.get_table("d.kv")
        i = 0
        while not stop.is_set():
            ev.append([{"v": i}, {"v": i + 1}])
            kv.upsert([{"k": i % 7, "n": 1}])
            i += 2
            stop.wait(0.01)

    def tierer(seed: int) -> None:
        own = fl.connect(conn.url, local_dir=str(conn.local_dir) + f"-t{seed}")
        own_lake = Lake(lake.properties)
        try:
            for _ in range(5):
                tier_once(own, own_lake)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_writer_with_tierers(writer, tierer, stop, tierers=2)
    assert not errors, errors
    tier_once(conn, lake)
    ev, kv = conn.get_table("d.ev"), conn.get_table("d.kv")
    lake_ev = lake_rows(lake, "d.ev")
    assert lake_ev.select("__bucket", "__offset").is_duplicated().sum() == 0
    assert sorted_rows(lake_ev, ["__bucket", "__offset", "v"]) == sorted_rows(_log_keyed(ev.scan_log()),
                                                                            ["__bucket", "__offset", "v"])
    assert sorted_rows(lake_rows(lake, "d.kv"), ["k", "n"]) == sorted_rows(kv.to_polars(), ["k", "n"])
    history = lake_rows(lake, "d.kv", "history")
    assert history.select("__bucket", "__offset").is_duplicated().sum() == 0
    assert history.height == kv.scan_log().height


def test_a_recreated_live_table_does_not_write_into_the_old_lake_table(local):
    conn, lake = local
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    conn.get_table("d.ev").append([{"v": 1}])
    tier_once(conn, lake)
    conn.drop_table("d.ev")
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    conn.get_table("d.ev").append([{"v": 2}])
    snapshot_before = lake.load("d.ev").current_snapshot().snapshot_id
    with pytest.raises(fl.LakeTableMismatchError, match="Lake.drop"):
        tier_once(conn, lake)
    assert lake.load("d.ev").current_snapshot().snapshot_id == snapshot_before
    assert lake_rows(lake, "d.ev")["v"].to_list() == [1]
    lake.drop("d.ev")
    tier_once(conn, lake)
    assert lake_rows(lake, "d.ev")["v"].to_list() == [2]


def test_bad_input_is_refused_with_clear_errors_and_changes_nothing(local, tmp_path, s3_url):
    conn, lake = local
    conn.create_table("d.off", schema={"v": "INT"})
    conn.get_table("d.off").append([{"v": 1}])
    with pytest.raises(fl.InvalidConfigError, match="table.datalake.enabled"):
        tier_once(conn, lake, tables=["d.off"])
    assert lake.load("d.off") is None and tier_once(conn, lake) == []
    with pytest.raises(fl.InvalidConfigError, match="uri"):
        Lake({"type": "sql", "warehouse": tmp_path.as_uri()})
    url, options = s3_url
    with pytest.raises(fl.InvalidConfigError, match="catalog_properties"):
        Lake.for_connection(fl.connect(url, storage_options=options))
    with pytest.raises(fl.TableNotExistError):
        tier_once(conn, lake, tables=["d.missing"])
    with pytest.raises(fl.InvalidConfigError, match="datalake.format"):  # the core accepts only iceberg
        conn.create_table("d.paimon", schema={"v": "INT"}, options={**LAKE_ON, "table.datalake.format": "paimon"})
    assert conn.get_table("d.off").scan_log()["v"].to_list() == [1]


def test_log_expired_before_tiering_is_skipped_and_reported(local, tmp_path):
    clock = [0]
    conn = fl.connect(local[0].url, local_dir=str(tmp_path / "c"), clock=lambda: clock[0])
    lake = local[1]
    conn.create_table("d.ev", schema={"v": "INT"}, options={**LAKE_ON, "table.log.ttl": "1 h"})
    conn.create_table("d.kv", schema={"k": "INT", "v": "INT"}, primary_key=["k"],
                      options={**LAKE_ON, "table.log.ttl": "1 h"})
    ev, kv = conn.get_table("d.ev"), conn.get_table("d.kv")
    for step in range(3):
        clock[0] = step * 3_600_000
        ev.append([{"v": step}])
        kv.upsert([{"k": step, "v": step}, {"k": 0, "v": 10 + step}])
    clock[0] = 3 * 3_600_000
    ev.expire_log(now_ms=clock[0])
    kv.expire_log(now_ms=clock[0])
    assert ev.earliest_offsets()[0] == 2 and kv.earliest_offsets()[0] > 0
    reports = {str(r.table): r for r in tier_once(conn, lake)}
    assert dict(reports["d.ev"].skipped_offsets) == {0: 2}
    assert lake_rows(lake, "d.ev")["v"].to_list() == [2]
    # the primary-key state is rebuilt from the live state (nothing lost), marked __offset = -1
    state = lake_rows(lake, "d.kv")
    assert sorted_rows(state, ["k", "v"]) == sorted_rows(kv.to_polars(), ["k", "v"])
    assert set(state["__offset"].to_list()) == {-1}
    assert dict(reports["d.kv"].skipped_offsets) == {0: kv.earliest_offsets()[0]}
    assert lake_rows(lake, "d.kv", "history").height == kv.scan_log().height
    # later rounds carry on from the state's offset
    kv.upsert([{"k": 9, "v": 9}])
    tier_once(conn, lake)
    assert sorted_rows(lake_rows(lake, "d.kv"), ["k", "v"]) == sorted_rows(kv.to_polars(), ["k", "v"])


def test_tiering_reads_the_changelog_without_opening_the_primary_key_state(local, tmp_path):
    """A tiering process reads logs only: it must not restore (on S3: download) the primary-key state."""
    from tiering import union_read

    conn, lake = local
    conn.create_table("d.kv", schema={"k": "INT", "v": "INT"}, primary_key=["k"], bucket_num=2, options=LAKE_ON)
    conn.get_table("d.kv").upsert([{"k": k, "v": k} for k in range(10)])
    conn.get_table("d.kv").snapshot()
    fresh = fl.connect(conn.url, local_dir=str(tmp_path / "tierer")).get_table("d.kv")
    assert tier_table(fresh, lake).rows == 10
    conn.get_table("d.kv").upsert([{"k": 1, "v": 100}])
    assert sorted_rows(union_read(fresh, lake).collect(), ["k", "v"]) == sorted_rows(
        conn.get_table("d.kv").to_polars(), ["k", "v"])
    assert all(fresh._tablets().opened_kv_tablet(b) is None for b in range(fresh.bucket_num))  # no state opened
    assert not (tmp_path / "tierer").exists() or not any((tmp_path / "tierer").rglob("*.arrow"))
