"""Partitioned tables (FLUSS-SEMANTICS §1.4): keys, value strings and names, dynamic and manual partitions, reads
and lookups that name partitions, dropping without delete records, and bad input that changes nothing."""

from __future__ import annotations

import datetime as dt
import threading

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.metadata.partition import value_string
from fluss_lake.keys.bucketing import buckets_of


def _conn(path, **kwargs):
    conn = fl.connect(str(path), **kwargs)
    conn.create_database("d", ignore_if_exists=True)
    return conn


def _orders(conn, **kwargs):
    conn.create_table("d.orders", schema={"day": "STRING", "id": "BIGINT", "customer": "BIGINT", "amount": "DOUBLE"},
                      primary_key=["day", "id"], partition_keys=["day"], bucket_num=3, **kwargs)
    return conn.get_table("d.orders")


def _state(table) -> dict:
    """Everything observable about a partitioned table: partitions, offsets per partition and bucket, rows."""
    rows = table.to_polars()
    return {"partitions": [p.name for p in table.list_partitions()], "offsets": table.end_offsets(),
            "rows": rows.sort(rows.columns).to_dicts()}


# ---------------------------------------------------------------- creation rules
@pytest.mark.parametrize("kwargs, error, words", [
    ({"schema": {"day": "STRING", "id": "INT"}, "primary_key": ["id"], "partition_keys": ["day"]},
     fl.InvalidTableError, "part of the primary key"),
    ({"schema": {"day": "STRING", "id": "INT"}, "primary_key": ["day"], "partition_keys": ["day"]},
     fl.InvalidTableError, "must not consist of the partition keys"),
    ({"schema": {"day": "STRING", "id": "INT"}, "partition_keys": ["nope"]}, fl.InvalidTableError, "not a column"),
    ({"schema": {"day": "STRING", "id": "INT"}, "partition_keys": ["day", "day"]}, fl.InvalidTableError, "twice"),
    ({"schema": {"p": "DECIMAL(10,2)", "id": "INT"}, "partition_keys": ["p"]}, fl.InvalidTableError, "DECIMAL"),
    ({"schema": {"day": "STRING", "id": "INT"}, "primary_key": ["day", "id"], "partition_keys": ["day"],
      "bucket_keys": ["day"]}, fl.InvalidTableError, "must not include partition keys"),
    ({"schema": {"day": "STRING", "id": "INT"}, "options": {"table.auto-partition.num-retention": "3"}},
     fl.InvalidConfigError, "need a partitioned table"),
    ({"schema": {"day": "STRING", "id": "INT"}, "partition_keys": ["day"],
      "options": {"table.auto-partition.enabled": "true", "table.auto-partition.time-unit": "WEEK"}},
     fl.InvalidConfigError, "unknown"),
    ({"schema": {"day": "STRING", "r": "STRING", "id": "INT"}, "partition_keys": ["r", "day"],
      "options": {"table.auto-partition.enabled": "true"}}, fl.InvalidConfigError, "is required"),
    ({"schema": {"day": "STRING", "r": "STRING", "id": "INT"}, "partition_keys": ["r", "day"],
      "options": {"table.auto-partition.enabled": "true", "table.auto-partition.key": "day",
                  "table.auto-partition.num-precreate": "2"}}, fl.InvalidConfigError, "must be 0"),
    ({"schema": {"day": "STRING", "id": "INT"}, "partition_keys": ["day"],
      "options": {"table.auto-partition.enabled": "true", "table.auto-partition.time-zone": "Mars/Olympus"}},
     fl.InvalidConfigError, "time zone"),
    ({"schema": {"day": "STRING", "id": "INT"}, "partition_keys": ["day"],
      "options": {"table.auto-partition.enabled": "true", "table.auto-partition.time-format": "dd-MM-yyyy"}},
     fl.InvalidConfigError, "largest first"),
    ({"schema": {"day": "DATE", "id": "INT"}, "partition_keys": ["day"],
      "options": {"table.auto-partition.enabled": "true", "table.auto-partition.time-unit": "MONTH"}},
     fl.InvalidConfigError, "DATE auto-partition key"),
])
def test_invalid_partitioned_tables_are_rejected_and_nothing_is_created(tmp_path, kwargs, error, words) -> None:
    conn = _conn(tmp_path)
    with pytest.raises(error, match=words):
        conn.create_table("d.t", **kwargs)
    assert conn.list_tables("d") == []


def test_partitioned_primary_key_table_buckets_by_the_key_without_partition_columns(tmp_path) -> None:
    orders = _orders(_conn(tmp_path))
    assert orders.partition_keys == ("day",) and orders.info.bucket_keys == ("id",)
    assert orders.is_partitioned and orders.partition_name is None


def test_altering_auto_partition_options_of_an_unpartitioned_table_is_rejected_unchanged(tmp_path) -> None:
    conn = _conn(tmp_path)
    conn.create_table("d.t", schema={"id": "INT"})
    before = conn.get_table_info("d.t")
    with pytest.raises(fl.InvalidConfigError, match="need a partitioned table"):
        conn.alter_table("d.t", set_options={"table.auto-partition.num-retention": "5"})
    assert conn.get_table_info("d.t") == before


def test_altering_kv_ttl_of_a_partitioned_table_is_rejected_unchanged(tmp_path) -> None:
    orders = _orders(_conn(tmp_path), options={"table.kv.ttl": "1 d"})
    before = orders.connection.get_table_info("d.orders")
    with pytest.raises(fl.InvalidAlterError, match="cannot be altered"):
        orders.connection.alter_table("d.orders", set_options={"table.kv.ttl": "2 d"})
    assert orders.connection.get_table_info("d.orders") == before


# ---------------------------------------------------------------- value strings and names
@pytest.mark.parametrize("value, dtype, expected", [
    ("eu-west_1", pl.String(), "eu-west_1"),
    (True, pl.Boolean(), "true"),
    (False, pl.Boolean(), "false"),
    (b"\x00\x0a\xff", pl.Binary(), "000aff"),
    (-5, pl.Int64(), "-5"),
    (7, pl.Int8(), "7"),
    (1.5, pl.Float64(), "1_5"),
    (-0.25, pl.Float64(), "-0_25"),
    (100.0, pl.Float64(), "100_0"),
    (0.001, pl.Float64(), "0_001"),
    (1e-4, pl.Float64(), "1_0E-4"),
    (12345678.0, pl.Float64(), "1_2345678E7"),
    (1e10, pl.Float64(), "1_0E10"),
    (1.1, pl.Float32(), "1_1"),
    (0.0, pl.Float64(), "0_0"),
    (float("nan"), pl.Float64(), "NaN"),
    (float("inf"), pl.Float32(), "Inf"),
    (float("-inf"), pl.Float64(), "-Inf"),
    (dt.date(2024, 11, 11), pl.Date(), "2024-11-11"),
    (dt.time(12, 30, 45, 123000), pl.Time(), "12-30-45_123"),
    (dt.datetime(2024, 1, 2, 3, 4, 5, 120000), pl.Datetime("us"), "2024-01-02-03-04-05_12"),
    (dt.datetime(2024, 1, 2, 3, 4, 5), pl.Datetime("ms"), "2024-01-02-03-04-05_"),
    (dt.datetime(2024, 1, 2, 4, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=1))), pl.Datetime("ms", "UTC"),
     "2024-01-02-03-04-05_"),
])
def test_partition_values_are_spelled_as_fluss_spells_them(value, dtype, expected) -> None:
    assert value_string(value, dtype) == expected


def test_partition_names_join_values_with_dollar_in_key_order_and_every_key_type_routes(tmp_path) -> None:
    conn = _conn(tmp_path)
    conn.create_table("d.m", schema={"ok": "BOOLEAN", "rate": "DOUBLE", "day": "DATE", "v": "INT"},
                      partition_keys=["day", "ok", "rate"])
    table = conn.get_table("d.m")
    table.append(pl.DataFrame({"ok": [True, False, True], "rate": [1.5, 1.5, 1.5], "v": [1, 2, 3],
                               "day": [dt.date(2024, 11, 11)] * 3}))
    assert [p.name for p in table.list_partitions()] == ["2024-11-11$false$1_5", "2024-11-11$true$1_5"]
    assert table.partition({"day": "2024-11-11", "ok": "true", "rate": "1_5"}).to_polars()["v"].sort().to_list() == [1, 3]
    spec = table.partition("2024-11-11$false$1_5").partition_info.spec
    assert spec == {"day": "2024-11-11", "ok": "false", "rate": "1_5"}


# ---------------------------------------------------------------- writes, reads, lookups
def test_log_table_partitions_are_created_on_write_with_their_own_dense_offsets(tmp_path) -> None:
    conn = _conn(tmp_path)
    conn.create_table("d.clicks", schema={"region": "STRING", "user": "BIGINT", "url": "STRING"},
                      partition_keys=["region"], bucket_num=2, bucket_keys=["user"])
    clicks = conn.get_table("d.clicks")
    result = clicks.append(pl.DataFrame({"region": ["eu", "us", "eu", "eu"], "user": [1, 2, 3, 1],
                                         "url": ["/a", "/b", "/c", "/d"]}))
    assert result.rows == 4 and all(isinstance(k, tuple) for k in result.offsets)
    clicks.append([{"region": "us", "user": 2, "url": "/e"}])
    assert [p.name for p in clicks.list_partitions()] == ["eu", "us"]
    eu, us = clicks.partition("eu"), clicks.partition({"region": "us"})
    assert sorted(eu.to_polars()["url"].to_list()) == ["/a", "/c", "/d"]
    assert us.to_polars()["url"].to_list() == ["/b", "/e"]
    us_log = us.scan_log()
    assert us_log["_offset"].to_list() == [0, 1] and set(us_log["_bucket"].to_list()) == {buckets_of(us.info, 
        pl.DataFrame({"user": [2]}, schema={"user": pl.Int64}))[0]}
    assert clicks.end_offsets() == {**{("eu", b): o for b, o in eu.end_offsets().items()},
                                    **{("us", b): o for b, o in us.end_offsets().items()}}
    whole = clicks.scan_log()
    assert whole.columns[0] == "_partition" and whole.height == 5
    assert whole.filter(pl.col("_partition") == "us")["url"].to_list() == ["/b", "/e"]
    # reading on from given offsets: only what came after; a partition missing from them is read from its start
    mark = clicks.end_offsets()
    assert clicks.scan_log(start_offsets=mark).height == 0
    clicks.append([{"region": "eu", "user": 9, "url": "/z"}, {"region": "apac", "user": 9, "url": "/y"}])
    assert sorted(clicks.scan_log(start_offsets=mark)["url"].to_list()) == ["/y", "/z"]
    eu_only = clicks.scan_log(start_offsets=mark, end_offsets={k: v for k, v in clicks.end_offsets().items()
                                                               if k[0] == "eu"})
    assert eu_only["url"].to_list() == ["/z"] and eu_only["_partition"].to_list() == ["eu"]


def test_primary_key_partitions_keep_rows_apart_and_lookups_route_by_partition(tmp_path, changelog_replay) -> None:
    orders = _orders(_conn(tmp_path))
    orders.upsert([{"day": "20241111", "id": 1, "customer": 7, "amount": 10.0},
                   {"day": "20241112", "id": 1, "customer": 8, "amount": 20.0},
                   {"day": "20241111", "id": 2, "customer": 7, "amount": 5.0}])
    orders.upsert([{"day": "20241111", "id": 1, "customer": 7, "amount": 11.0}])
    orders.delete([{"day": "20241111", "id": 2}])
    state = orders.to_polars().sort("day", "id")
    assert state.select("day", "id", "amount").rows() == [("20241111", 1, 11.0), ("20241112", 1, 20.0)]
    assert orders.to_lazy().collect().sort("day", "id").equals(state)
    assert changelog_replay(orders).equals(state.sort("day", "id"))
    got = orders.lookup([{"day": "20241112", "id": 1}, {"day": "20990101", "id": 1}, {"day": "20241111", "id": 1},
                         {"day": "20241111", "id": 2}])
    assert got["amount"].to_list() == [20.0, None, 11.0, None]
    assert got["day"].to_list() == ["20241112", "20990101", "20241111", "20241111"]
    found = orders.new_lookup().lookup([{"day": "20990101", "id": 1}, {"day": "20241112", "id": 1}], with_found=True)
    assert found["_found"].to_list() == [False, True]
    assert orders.new_lookup().lookup_one({"day": "20241112", "id": 1})["customer"] == 8
    assert orders.new_lookup().lookup_one({"day": "20990101", "id": 1}) is None
    log = orders.changelog()
    assert log.columns[0] == "_partition"
    assert log.filter(pl.col("_partition") == "20241111")["_change_type"].to_list() == [
        "insert", "insert", "update_before", "update_after", "delete"]
    binlog = orders.binlog()
    assert binlog.filter(pl.col("_partition") == "20241111")["_change_type"].to_list() == [
        "insert", "insert", "update", "delete"]


def test_prefix_lookup_on_a_partitioned_table_names_partition_and_bucket_key(tmp_path) -> None:
    conn = _conn(tmp_path)
    conn.create_table("d.items", schema={"day": "STRING", "customer": "BIGINT", "item": "BIGINT", "qty": "INT"},
                      primary_key=["day", "customer", "item"], partition_keys=["day"], bucket_keys=["customer"],
                      bucket_num=4)
    items = conn.get_table("d.items")
    items.upsert(pl.DataFrame({"day": ["a", "a", "a", "b"], "customer": [1, 1, 2, 1], "item": [10, 11, 10, 10],
                               "qty": [1, 2, 3, 4]}))
    got = items.prefix_lookup([{"day": "b", "customer": 1}, {"day": "a", "customer": 1}, {"day": "zz", "customer": 1}])
    assert got.select("_key_index", "day", "item", "qty").sort("_key_index", "item").rows() == [
        (0, "b", 10, 4), (1, "a", 10, 1), (1, "a", 11, 2)]
    with pytest.raises(fl.InvalidConfigError, match="partition keys, then the bucket key"):
        items.new_prefix_lookup(columns=["customer"])


def test_per_bucket_operations_on_the_whole_partitioned_table_say_to_name_a_partition(tmp_path) -> None:
    orders = _orders(_conn(tmp_path))
    with pytest.raises(fl.UnsupportedOperationError, match="table.partition"):
        orders._tablets().log_tablet(0)
    with pytest.raises(fl.InvalidConfigError, match="partition name, bucket"):
        orders.new_scan().subscribe(0, 0)
    conn = orders.connection
    conn.create_table("d.plain", schema={"id": "INT"})
    with pytest.raises(fl.UnsupportedOperationError, match="not partitioned"):
        conn.get_table("d.plain").partition("x")
    assert conn.get_table("d.plain").partition_tables() == [conn.get_table("d.plain")]


def test_alter_add_column_reaches_every_partition(tmp_path) -> None:
    orders = _orders(_conn(tmp_path))
    orders.upsert([{"day": "a", "id": 1, "customer": 1, "amount": 1.0}])
    handle = orders.partition("a")
    orders.connection.alter_table("d.orders", add_columns={"note": "STRING"})
    orders = orders.connection.get_table("d.orders")
    orders.upsert([{"day": "a", "id": 2, "customer": 1, "amount": 1.0, "note": "hi"}])
    assert handle.to_polars().sort("id")["note"].to_list() == [None, "hi"]


# ---------------------------------------------------------------- manual add / drop
def test_drop_partition_removes_its_data_without_delete_records_and_a_new_one_starts_empty(tmp_path) -> None:
    conn = _conn(tmp_path)
    orders = _orders(conn)
    orders.upsert([{"day": d, "id": i, "customer": 1, "amount": 1.0} for d in ("a", "b") for i in range(5)])
    other = _conn(tmp_path, local_dir=str(tmp_path / "other")).get_table("d.orders")
    stale_writer = other.new_upsert()
    stale_writer.upsert([{"day": "a", "id": 99, "customer": 1, "amount": 1.0}])  # partition "a" resolved here
    orders.drop_partition("a")
    assert [p.name for p in orders.list_partitions()] == ["b"]
    assert orders.to_polars()["day"].unique().to_list() == ["b"]
    assert "delete" not in orders.changelog()["_change_type"].to_list()
    assert orders.lookup([{"day": "a", "id": 1}])["amount"].to_list() == [None]
    with pytest.raises(fl.PartitionNotExistError, match="was dropped"):
        stale_writer.flush()
    with pytest.raises(fl.PartitionNotExistError):
        orders.drop_partition("a")
    orders.drop_partition("a", ignore_if_not_exists=True)
    orders.upsert([{"day": "a", "id": 3, "customer": 2, "amount": 2.0}])
    again = orders.partition("a")
    assert again.to_polars()["id"].to_list() == [3] and sum(again.end_offsets().values()) == 1
    other.upsert([{"day": "a", "id": 4, "customer": 2, "amount": 2.0}])  # the other process re-resolves it
    assert sorted(orders.partition("a").to_polars()["id"].to_list()) == [3, 4]


def test_manual_partition_creation_checks_names_and_existence(tmp_path) -> None:
    conn = _conn(tmp_path)
    conn.create_table("d.t", schema={"region": "STRING", "day": "STRING", "v": "INT"}, partition_keys=["region", "day"])
    table = conn.get_table("d.t")
    created = table.create_partition({"day": "20241111", "region": "eu"})
    assert created.name == "eu$20241111" and created.spec == {"region": "eu", "day": "20241111"}
    with pytest.raises(fl.PartitionAlreadyExistError):
        table.create_partition("eu$20241111")
    assert table.create_partition("eu$20241111", ignore_if_exists=True) == created
    for bad, words in [({"region": "eu"}, "exactly the partition keys"), ("eu", "has 1 value"),
                       ({"region": "e.u", "day": "1"}, "invalid"), ({"region": "__x", "day": "1"}, "reserved"),
                       ({"region": "x" * 201, "day": "1"}, "invalid"), ({"region": "", "day": "1"}, "invalid")]:
        with pytest.raises(fl.InvalidPartitionError, match=words):
            table.create_partition(bad)
    assert [p.name for p in table.list_partitions()] == ["eu$20241111"]
    with pytest.raises(fl.PartitionNotExistError, match="does not exist"):
        table.partition("us$20241111")


def test_partition_limit(tmp_path) -> None:
    conn = _conn(tmp_path, max_partition_num=2)
    conn.create_table("d.t", schema={"p": "STRING", "v": "INT"}, partition_keys=["p"])
    table = conn.get_table("d.t")
    table.append([{"p": "a", "v": 1}, {"p": "b", "v": 1}])
    with pytest.raises(fl.TooManyPartitionsError, match="max_partition_num"):
        table.append([{"p": "c", "v": 1}])
    assert [p.name for p in table.list_partitions()] == ["a", "b"]


# ---------------------------------------------------------------- bad input loses nothing
@pytest.mark.parametrize("rows, error, words", [
    ([{"day": None, "id": 5, "customer": 1, "amount": 1.0}], fl.NullPrimaryKeyError, "null"),
    ([{"day": "2024.11.11", "id": 5, "customer": 1, "amount": 1.0}], fl.InvalidPartitionError, "invalid"),
    ([{"day": "__hidden", "id": 5, "customer": 1, "amount": 1.0}], fl.InvalidPartitionError, "reserved"),
    ([{"day": "x" * 201, "id": 5, "customer": 1, "amount": 1.0}], fl.InvalidPartitionError, "invalid"),
    ([{"day": "bad day", "id": 5, "customer": 1, "amount": 1.0}], fl.InvalidPartitionError, "invalid"),
])
def test_a_batch_with_a_bad_partition_value_changes_nothing(tmp_path, rows, error, words) -> None:
    orders = _orders(_conn(tmp_path))
    orders.upsert([{"day": "a", "id": 1, "customer": 1, "amount": 1.0}])
    before = _state(orders)
    good = [{"day": "new", "id": 9, "customer": 1, "amount": 1.0}]  # valid rows of the same batch: not written either
    with pytest.raises(error, match=words):
        orders.upsert(good + rows)
    assert _state(orders) == before


def test_a_log_batch_with_a_null_partition_value_changes_nothing(tmp_path) -> None:
    conn = _conn(tmp_path)
    conn.create_table("d.ev", schema={"region": "STRING", "v": "INT"}, partition_keys=["region"])
    events = conn.get_table("d.ev")
    events.append([{"region": "eu", "v": 1}])
    before = _state(events)
    with pytest.raises(fl.InvalidPartitionError, match="nulls"):
        events.append([{"region": "us", "v": 2}, {"region": None, "v": 3}])
    assert _state(events) == before


def test_without_dynamic_creation_a_write_to_a_missing_partition_changes_nothing(tmp_path) -> None:
    conn = _conn(tmp_path, dynamic_partition_creation=False)
    orders = _orders(conn)
    orders.create_partition("a")
    orders.upsert([{"day": "a", "id": 1, "customer": 1, "amount": 1.0}])
    before = _state(orders)
    with pytest.raises(fl.PartitionNotExistError, match="dynamic partition creation is off"):
        orders.upsert([{"day": "a", "id": 2, "customer": 1, "amount": 1.0},
                       {"day": "b", "id": 1, "customer": 1, "amount": 1.0}])
    assert _state(orders) == before


def test_concurrent_writers_creating_the_same_partitions_agree_on_one(tmp_path) -> None:
    """Writers with their own connections (as separate processes have) race to create the same partitions."""
    _orders(_conn(tmp_path))
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            table = _conn(tmp_path, local_dir=str(tmp_path / f"w{n}")).get_table("d.orders")
            table.upsert([{"day": f"p{d}", "id": n, "customer": n, "amount": float(n)} for d in range(4)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    orders = _conn(tmp_path, local_dir=str(tmp_path / "check")).get_table("d.orders")
    assert [p.name for p in orders.list_partitions()] == ["p0", "p1", "p2", "p3"]
    state = orders.to_polars()
    assert state.height == 24 and state.group_by("day").len()["len"].to_list() == [6] * 4


def test_partitioned_table_on_s3(s3_url, tmp_path) -> None:
    url, options = s3_url
    conn = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "cache"))
    conn.create_database("d")
    orders = _orders(conn)
    orders.upsert([{"day": d, "id": i, "customer": 1, "amount": 1.0} for d in ("a", "b") for i in range(3)])
    orders.drop_partition("a")
    fresh = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "cache2")).get_table("d.orders")
    assert [p.name for p in fresh.list_partitions()] == ["b"]
    assert fresh.to_polars().sort("id")["id"].to_list() == [0, 1, 2]


# ---------------------------------------------------------------- limit scan
def test_limit_scan_reads_at_most_the_limit_from_state_or_the_log_end(tmp_path) -> None:
    conn = _conn(tmp_path)
    orders = _orders(conn)
    orders.upsert([{"day": d, "id": i, "customer": i, "amount": float(i)} for d in ("a", "b") for i in range(50)])
    orders.delete([{"day": "a", "id": i} for i in range(45)])
    rows = orders.limit_scan(30, columns=["day", "id"])
    assert rows.columns == ["day", "id"] and rows.height == 30
    state = {tuple(r) for r in orders.to_polars().select("day", "id").iter_rows()}
    assert {tuple(r) for r in rows.iter_rows()} <= state  # only current rows: deleted keys never appear
    assert orders.limit_scan(1000).height == 55
    conn.create_table("d.ev", schema={"v": "INT"}, bucket_num=1)
    events = conn.get_table("d.ev")
    for v in range(10):
        events.append([{"v": v}])
    assert events.limit_scan(3)["v"].to_list() == [7, 8, 9]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(fl.InvalidConfigError, match="positive integer"):
            orders.limit_scan(bad)


def test_a_scanner_on_the_whole_partitioned_table_follows_new_and_dropped_partitions(tmp_path) -> None:
    conn = _conn(tmp_path)
    conn.create_table("d.ev", schema={"region": "STRING", "v": "INT"}, partition_keys=["region"], bucket_num=2,
                      bucket_keys=["v"])
    events = conn.get_table("d.ev")
    events.append([{"region": "eu", "v": 1}])
    scanner = events.new_scan()
    scanner.subscribe_from_beginning()
    first = scanner.poll()
    assert first.columns[:2] == ["_partition", "_bucket"] and first.select("_partition", "v").rows() == [("eu", 1)]
    events.append([{"region": "us", "v": 2}, {"region": "eu", "v": 3}])  # "us" is created after subscribing
    assert sorted(scanner.poll().select("_partition", "v").rows()) == [("eu", 3), ("us", 2)]
    events.drop_partition("eu")
    events.append([{"region": "us", "v": 4}])
    assert scanner.poll().select("_partition", "v").rows() == [("us", 4)]
    assert all(key[0] == "us" for key in scanner.positions)
    one = events.new_scan(columns=["v"])
    us = events.partition("us")
    bucket = buckets_of(us.info, pl.DataFrame({"v": [4]}, schema={"v": pl.Int32}))[0]
    one.subscribe(("us", bucket), 0)
    assert one.poll()["v"].to_list() == us.scan_log().filter(pl.col("_bucket") == bucket)["v"].to_list()
    assert events.new_scan().poll().height == 0  # nothing subscribed
