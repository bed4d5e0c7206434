"""Log tables: input forms, bucket routing, offsets, commit timestamps, bounded scans, projection, subscriptions,
statistics-based batch skipping and out-of-range offsets."""

from __future__ import annotations

import itertools
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

import fluss_lake as fl
import fluss_lake.log.log_batch as log_batch_module
import fluss_lake.log.log_tablet as log_tablet_module
from fluss_lake import FlussLakeError, InvalidConfigError, OffsetOutOfRangeError
from fluss_lake.keys.bucketing import assign_buckets

SYSTEM = ["_bucket", "_offset", "_change_type", "_commit_timestamp"]


@pytest.fixture
def conn(tmp_path: Path) -> fl.Connection:
    c = fl.connect(tmp_path)
    c.create_database("db")
    return c


def by_position(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort("_bucket", "_offset")


# ---------------------------------------------------------------------------------------------- input forms
ROWS = [{"id": i, "name": f"n{i}", "score": i / 4, "day": date(2024, 1, 1) + timedelta(days=i)} for i in range(7)]
SCHEMA = {"id": "BIGINT", "name": "STRING", "score": "DOUBLE", "day": "DATE"}


def as_form(form: str, rows: list[dict]) -> Any:
    if form == "dicts":
        return rows
    if form == "polars":
        return pl.DataFrame(rows)
    if form == "lazy":
        return pl.DataFrame(rows).lazy()
    if form == "arrow":
        return pa.Table.from_pylist(rows)
    if form == "record_batch":
        return pa.RecordBatch.from_pylist(rows)
    if form == "record_batches":
        return [pa.RecordBatch.from_pylist(rows[:3]), pa.RecordBatch.from_pylist(rows[3:])]
    raise AssertionError(form)


@pytest.mark.parametrize("form", ["dicts", "polars", "lazy", "arrow", "record_batch", "record_batches"])
def test_append_forms(conn: fl.Connection, form: str) -> None:
    conn.create_table("db.t", schema=SCHEMA)
    table = conn.get_table("db.t")
    result = table.append(as_form(form, ROWS))
    assert result.rows == result.records == len(ROWS)
    assert result.offsets == {0: (0, len(ROWS))}
    got = table.to_polars()
    assert got.schema == pl.Schema({"id": pl.Int64, "name": pl.String, "score": pl.Float64, "day": pl.Date})
    assert got.to_dicts() == ROWS  # one bucket: write order kept
    scanned = table.scan_log()
    assert scanned.columns == [*SYSTEM, *SCHEMA]
    assert scanned["_offset"].to_list() == list(range(len(ROWS)))
    assert set(scanned["_change_type"].cast(pl.String).to_list()) == {"+A"}


def test_append_forms_agree(conn: fl.Connection) -> None:
    forms = ["dicts", "polars", "arrow", "record_batches"]
    for form in forms:
        conn.create_table(f"db.{form}", schema=SCHEMA, bucket_num=3, bucket_keys=["id"])
        conn.get_table(f"db.{form}").append(as_form(form, ROWS))
    scans = [by_position(conn.get_table(f"db.{form}").scan_log()).drop("_commit_timestamp") for form in forms]
    for scan in scans[1:]:
        assert_frame_equal(scan, scans[0])


def test_append_with_column_order_differing_from_schema(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema=SCHEMA)
    table = conn.get_table("db.t")
    table.append(pl.DataFrame(ROWS).select("day", "score", "id", "name"))
    assert table.to_polars().columns == list(SCHEMA)
    assert table.to_polars().to_dicts() == ROWS


def test_empty_append_writes_nothing(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema=SCHEMA, bucket_num=2)
    table = conn.get_table("db.t")
    assert table.append([]).offsets == {}
    assert table.append(pl.DataFrame(schema={"id": pl.Int64, "name": pl.String, "score": pl.Float64,
                                             "day": pl.Date})).offsets == {}
    assert table.end_offsets() == {0: 0, 1: 0}


def test_writer_context_manager_flushes(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema=SCHEMA)
    table = conn.get_table("db.t")
    with table.new_append() as writer:
        writer.append(ROWS[:2])
        writer.append(pl.DataFrame(ROWS[2:]))
        assert table.end_offsets() == {0: 0}  # buffered until flush
    assert table.to_polars().to_dicts() == ROWS
    assert table.end_offsets() == {0: len(ROWS)}


# ---------------------------------------------------------------------------------------------- bucket routing
def test_bucket_routing_matches_assign_buckets(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema={"user": "BIGINT", "v": "INT"}, bucket_num=5, bucket_keys=["user"])
    table = conn.get_table("db.t")
    users = [int(u) for u in np.random.default_rng(7).integers(-10**12, 10**12, 300)]
    table.append(pl.DataFrame({"user": users, "v": range(300)}, schema={"user": pl.Int64, "v": pl.Int32}))
    scanned = table.scan_log().sort("v")
    expected = assign_buckets([pa.array(users, pa.int64())], 5)
    assert scanned["_bucket"].to_list() == expected.tolist()
    assert len(set(expected.tolist())) == 5  # all buckets used


def test_bucket_routing_multi_column_key(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema={"user": "INT", "region": "STRING", "v": "INT"}, bucket_num=7,
                      bucket_keys=["region", "user"])
    table = conn.get_table("db.t")
    rows = [{"user": i % 13, "region": ["eu", "us", "apac"][i % 3], "v": i} for i in range(120)]
    table.append(rows)
    scanned = table.scan_log().sort("v")
    expected = assign_buckets([pa.array([r["region"] for r in rows], pa.string()),
                               pa.array([r["user"] for r in rows], pa.int32())], 7)
    assert scanned["_bucket"].to_list() == expected.tolist()


def test_bucket_routing_is_deterministic(conn: fl.Connection, tmp_path: Path) -> None:
    """Same key -> same bucket whatever the batch, the writer, the connection or the table."""
    for name in ("a", "b"):
        conn.create_table(f"db.{name}", schema={"k": "STRING", "v": "INT"}, bucket_num=8, bucket_keys=["k"])
    keys = [f"key-{i}" for i in range(64)]
    conn.get_table("db.a").append([{"k": k, "v": i} for i, k in enumerate(keys)])
    other = fl.connect(tmp_path).get_table("db.b")
    for i, k in reversed(list(enumerate(keys))):  # one key per batch, reverse order, other connection
        other.append([{"k": k, "v": i}])
    a = dict(conn.get_table("db.a").scan_log().select("k", "_bucket").iter_rows())
    b = dict(conn.get_table("db.b").scan_log().select("k", "_bucket").iter_rows())
    assert a == b
    assert {k: bucket for k, bucket in a.items()} == dict(zip(keys, assign_buckets([pa.array(keys)], 8).tolist(),
                                                              strict=True))


@pytest.mark.parametrize(("dtype", "value", "num", "bucket"), [
    ("INT", 1, 4, 0), ("INT", 1, 8, 4), ("INT", 1, 16, 12), ("STRING", "a", 4, 3), ("STRING", "a", 16, 11),
])
def test_bucket_golden_values(conn: fl.Connection, dtype: str, value: Any, num: int, bucket: int) -> None:
    """Fluss's own bucket for a key (FLUSS-SEMANTICS 1.3, derived examples)."""
    conn.create_table("db.t", schema={"k": dtype, "v": "INT"}, bucket_num=num, bucket_keys=["k"])
    table = conn.get_table("db.t")
    result = table.append([{"k": value, "v": 0}])
    assert list(result.offsets) == [bucket]
    assert table.scan_log()["_bucket"].to_list() == [bucket]


def test_sticky_without_bucket_key(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema={"v": "INT"}, bucket_num=4)
    table = conn.get_table("db.t")
    assert "client.writer.bucket.no-key-assigner" not in table.info.options  # sticky is the default
    flushes = []
    for i in range(12):
        result = table.append([{"v": 10 * i + j} for j in range(5)])
        assert len(result.offsets) == 1  # each flush goes to one bucket
        (bucket, (base, end)), = result.offsets.items()
        assert end - base == 5
        flushes.append((bucket, base, i))
    scanned = table.scan_log()
    for bucket, base, i in flushes:
        rows = scanned.filter((pl.col("_bucket") == bucket) & pl.col("_offset").is_between(base, base + 4))
        assert rows["v"].to_list() == [10 * i + j for j in range(5)]
    # a writer that buffers several appends sends them as one batch to one bucket
    writer = table.new_append()
    for i in range(4):
        writer.append([{"v": 1000 + i}])
    result = writer.flush()
    assert len(result.offsets) == 1 and result.rows == 4


def test_round_robin_writer_rotates_buckets(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema={"v": "INT"}, bucket_num=4,
                      options={"client.writer.bucket.no-key-assigner": "ROUND_ROBIN"})
    table = conn.get_table("db.t")
    assert table.info.options["client.writer.bucket.no-key-assigner"] == "round_robin"
    writer = table.new_append()
    buckets = []
    for i in range(9):
        writer.append([{"v": i}, {"v": 100 + i}])
        result = writer.flush()
        assert len(result.offsets) == 1
        buckets.extend(result.offsets)
    first = buckets[0]
    assert buckets == [(first + i) % 4 for i in range(9)]
    assert table.end_offsets() == {b: 2 * buckets.count(b) for b in range(4)}


def test_round_robin_rotates_across_table_appends(conn: fl.Connection) -> None:
    """The no-key assigner belongs to the client (Fluss keeps one per table in its WriterClient), so consecutive
    ``table.append`` calls on one connection rotate too."""
    conn.create_table("db.t", schema={"v": "INT"}, bucket_num=3,
                      options={"client.writer.bucket.no-key-assigner": "round_robin"})
    table = conn.get_table("db.t")
    buckets = [next(iter(table.append([{"v": i}]).offsets)) for i in range(9)]
    assert buckets == [(buckets[0] + i) % 3 for i in range(9)]


# ---------------------------------------------------------------------------------------------- offsets, timestamps
def test_dense_offsets_per_bucket_from_zero(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema={"k": "INT", "v": "INT"}, bucket_num=3, bucket_keys=["k"])
    table = conn.get_table("db.t")
    ends = {b: 0 for b in range(3)}
    rng = np.random.default_rng(1)
    for i in range(15):
        keys = rng.integers(0, 50, int(rng.integers(1, 9))).tolist()
        result = table.append([{"k": k, "v": i} for k in keys])
        for bucket, (base, end) in result.offsets.items():
            assert base == ends[bucket]  # each batch starts at the previous end
            assert end > base
            ends[bucket] = end
        assert sum(end - base for base, end in result.offsets.values()) == len(keys)
    assert table.end_offsets() == ends
    assert table.earliest_offsets() == {b: 0 for b in range(3)}
    scanned = table.scan_log()
    for bucket in range(3):
        offsets = scanned.filter(pl.col("_bucket") == bucket)["_offset"].to_list()
        assert sorted(offsets) == list(range(ends[bucket]))


def test_commit_timestamps_from_connection_clock(tmp_path: Path) -> None:
    now = [1_000]
    conn = fl.connect(tmp_path, clock=lambda: now[0])
    conn.create_database("db")
    conn.create_table("db.t", schema={"v": "INT"})
    table = conn.get_table("db.t")
    for i, ts in enumerate([1_000, 5_000, 3_000, 7_000, 7_000]):  # the clock goes back once
        now[0] = ts
        table.append([{"v": i}, {"v": 10 + i}])
    scanned = table.scan_log()
    assert scanned.schema["_commit_timestamp"] == pl.Datetime("ms", "UTC")
    millis = scanned["_commit_timestamp"].dt.epoch("ms").to_list()
    assert millis == [1_000, 1_000, 5_000, 5_000, 5_000, 5_000, 7_000, 7_000, 7_000, 7_000]


def test_commit_timestamps_non_decreasing_across_writers(tmp_path: Path) -> None:
    fast = fl.connect(tmp_path, clock=lambda: 9_000)
    slow = fl.connect(tmp_path, clock=lambda: 2_000)
    fast.create_database("db")
    fast.create_table("db.t", schema={"k": "INT"}, bucket_num=2, bucket_keys=["k"])
    slow.get_table("db.t").append([{"k": k} for k in range(10)])
    fast.get_table("db.t").append([{"k": k} for k in range(10)])
    slow.get_table("db.t").append([{"k": k} for k in range(10)])  # behind the last commit: clamped
    scanned = fast.get_table("db.t").scan_log()
    for bucket in range(2):
        ts = scanned.filter(pl.col("_bucket") == bucket).sort("_offset")["_commit_timestamp"].dt.epoch("ms").to_list()
        assert ts == sorted(ts)
        assert ts[0] == 2_000 and ts[-1] == 9_000


def test_default_clock_is_wall_clock(conn: fl.Connection) -> None:
    import time

    conn.create_table("db.t", schema={"v": "INT"})
    before = int(time.time() * 1000)
    conn.get_table("db.t").append([{"v": 1}])
    after = int(time.time() * 1000)
    (ts,) = conn.get_table("db.t").scan_log()["_commit_timestamp"].dt.epoch("ms").to_list()
    assert before <= ts <= after


# ---------------------------------------------------------------------------------------------- bounded scans
@pytest.fixture
def two_buckets(conn: fl.Connection) -> fl.Table:
    conn.create_table("db.t", schema={"k": "INT", "v": "INT", "s": "STRING"}, bucket_num=2, bucket_keys=["k"])
    table = conn.get_table("db.t")
    for i in range(5):  # 5 batches per bucket, 3 rows each
        rows = []
        for bucket in range(2):
            keys = [k for k in range(200) if assign_buckets([pa.array([k], pa.int32())], 2)[0] == bucket]
            rows += [{"k": keys[(3 * i + j) % len(keys)], "v": 100 * i + 10 * bucket + j, "s": f"{i}-{j}"}
                     for j in range(3)]
        table.append(rows)
    assert table.end_offsets() == {0: 15, 1: 15}
    return table


def test_scan_log_ranges(two_buckets: fl.Table) -> None:
    table = two_buckets
    full = table.scan_log()
    for start0, end0, start1 in [(0, 15, 0), (1, 14, 4), (3, 6, 15), (4, 5, 7), (7, 7, 14), (15, 15, 0)]:
        got = table.scan_log(start_offsets={0: start0, 1: start1}, end_offsets={0: end0})
        expected = full.filter(((pl.col("_bucket") == 0) & pl.col("_offset").is_between(start0, end0, "left"))
                               | ((pl.col("_bucket") == 1) & (pl.col("_offset") >= start1)))
        assert_frame_equal(by_position(got), by_position(expected))
    # only one bucket bounded, the other read whole
    got = table.scan_log(start_offsets={1: 13})
    expected = full.filter((pl.col("_bucket") == 0) | (pl.col("_offset") >= 13))
    assert_frame_equal(by_position(got), by_position(expected))


def test_scan_log_mid_batch_offsets_are_exact(two_buckets: fl.Table) -> None:
    full = two_buckets.scan_log()
    got = two_buckets.scan_log(start_offsets={0: 4, 1: 15}, end_offsets={0: 8})
    assert got["_offset"].to_list() == [4, 5, 6, 7]
    assert got["v"].to_list() == full.filter((pl.col("_bucket") == 0) & pl.col("_offset").is_in([4, 5, 6, 7]))[
        "v"].to_list()


def test_projection(two_buckets: fl.Table) -> None:
    full = by_position(two_buckets.scan_log())
    got = by_position(two_buckets.scan_log(columns=["s", "k"]))
    assert got.columns == [*SYSTEM, "s", "k"]
    assert_frame_equal(got, full.select(*SYSTEM, "s", "k"))
    assert two_buckets.to_polars(columns=["v"]).columns == ["v"]
    with pytest.raises(InvalidConfigError, match="'nope'"):
        two_buckets.scan_log(columns=["nope"])
    with pytest.raises(InvalidConfigError, match="'nope'"):
        two_buckets.new_scan(columns=["v", "nope"])


def test_projection_with_schema_evolution(conn: fl.Connection) -> None:
    """Projecting only columns a batch predates still returns that batch's rows (padded with nulls)."""
    conn.create_table("db.t", schema={"a": "INT"})
    table = conn.get_table("db.t")
    table.append([{"a": 1}])
    conn.alter_table("db.t", add_columns={"b": "STRING"})
    table.append([{"a": 2, "b": "x"}])
    assert table.scan_log(columns=["b"])["b"].to_list() == [None, "x"]
    assert table.scan_log(columns=["b"])["_offset"].to_list() == [0, 1]
    assert table.to_polars(columns=["b"])["b"].to_list() == [None, "x"]
    scanner = table.new_scan(columns=["b"])
    scanner.subscribe_from_beginning()
    assert scanner.poll()["b"].to_list() == [None, "x"]
    assert table.scan_log(start_offsets={0: 1}, columns=["b", "a"]).select("b", "a").rows() == [("x", 2)]


# ---------------------------------------------------------------------------------------------- subscriptions
def test_scanner_polls_only_new_records(two_buckets: fl.Table) -> None:
    table = two_buckets
    scanner = table.new_scan()
    scanner.subscribe_from_beginning()
    first = scanner.poll()
    assert first.height == 30
    assert_frame_equal(by_position(first), by_position(table.scan_log()))
    assert scanner.poll().height == 0
    table.append([{"k": 1, "v": -1, "s": "new"}, {"k": 2, "v": -2, "s": "new"}, {"k": 3, "v": -3, "s": "new"}])
    second = scanner.poll()
    assert sorted(second["v"].to_list()) == [-3, -2, -1]
    assert (second["_offset"] >= 15).all()
    assert scanner.poll().height == 0


def test_scanner_from_latest_and_from_offset(two_buckets: fl.Table, tmp_path: Path) -> None:
    table = two_buckets
    latest = table.new_scan(columns=["v"])
    latest.subscribe_from_latest()
    assert latest.poll().height == 0
    mid = table.new_scan()
    mid.subscribe(1, 10)
    got = mid.poll()
    assert set(got["_bucket"].to_list()) == {1} and got["_offset"].to_list() == list(range(10, 15))
    # a writer in another process (connection) is seen by polling
    fl.connect(tmp_path).get_table("db.t").append([{"k": 5, "v": 555, "s": "other"}])
    polled = latest.poll()
    assert polled.columns == [*SYSTEM, "v"] and polled["v"].to_list() == [555]
    mid_new = mid.poll()
    expected_bucket = int(assign_buckets([pa.array([5], pa.int32())], 2)[0])
    assert mid_new["v"].to_list() == ([555] if expected_bucket == 1 else [])
    mid.unsubscribe(1)
    table.append([{"k": 5, "v": 556, "s": "other"}])
    assert mid.poll().height == 0
    with pytest.raises(InvalidConfigError, match="bucket 2"):
        mid.subscribe(2, 0)


# ---------------------------------------------------------------------------------------------- filters and statistics
STATS_SCHEMA = {"id": "INT", "price": "DOUBLE", "name": "STRING", "day": "DATE", "flag": "BOOLEAN",
                "nostat": "BIGINT", "raw": "BYTES"}
N_BATCHES = 6


def stats_batch(j: int) -> pl.DataFrame:
    """Batch j: ids 10j..10j+9; batch 2 has no names, batch 3 half null prices, batch 4 one constant name."""
    rows = []
    for i in range(10):
        ident = 10 * j + i
        rows.append({
            "id": ident,
            "price": None if (j == 3 and i % 2 == 0) else float(100 * j + i),
            "name": None if j == 2 else ("same" if j == 4 else f"n{j}{i}"),
            "day": date(2024, 1, 1) + timedelta(days=j),
            "flag": j % 2 == 0,
            "nostat": 1000 - ident,
            "raw": f"r{ident}".encode(),
        })
    return pl.DataFrame(rows, schema={"id": pl.Int32, "price": pl.Float64, "name": pl.String, "day": pl.Date,
                                      "flag": pl.Boolean, "nostat": pl.Int64, "raw": pl.Binary})


class DecodeCounter:
    """Counts decoded batches (rows read) by wrapping decode_batch where the log tablet calls it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = log_batch_module.decode_batch

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(log_batch_module, "decode_batch", counting)
        monkeypatch.setattr(log_tablet_module, "decode_batch", counting)

    def reset(self) -> None:
        self.calls = 0


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> DecodeCounter:
    return DecodeCounter(monkeypatch)


def make_stats_table(conn: fl.Connection, name: str, stats: str | None) -> fl.Table:
    options = {"table.statistics.columns": stats} if stats is not None else {}
    conn.create_table(f"db.{name}", schema=STATS_SCHEMA, options=options)
    table = conn.get_table(f"db.{name}")
    for j in range(N_BATCHES):
        table.append(stats_batch(j))
    return table


# (id, filters, the same predicate in Polars, batches that must be decoded: an int, or a pair (with the listed
# statistics columns id,price,name,day,flag ; with '*'), or None when skipping is optional)
FILTER_CASES: list[tuple[str, Any, pl.Expr, int | tuple[int, int] | None]] = [
    ("eq", [("id", "=", 15)], pl.col("id") == 15, 1),
    ("eq2", [("id", "==", 15)], pl.col("id") == 15, 1),
    ("eq-absent", [("id", "=", 1000)], pl.col("id") == 1000, 0),
    ("ne", [("id", "!=", 15)], pl.col("id") != 15, N_BATCHES),
    ("ne-constant-batch", [("name", "!=", "same")], pl.col("name") != "same", 4),
    ("ne-sql", [("name", "<>", "same")], pl.col("name") != "same", 4),
    ("lt", [("id", "<", 10)], pl.col("id") < 10, 1),
    ("le", [("id", "<=", 10)], pl.col("id") <= 10, 2),
    ("gt", [("id", ">", 49)], pl.col("id") > 49, 1),
    ("ge", [("id", ">=", 50)], pl.col("id") >= 50, 1),
    ("gt-double", [("price", ">", 450.0)], pl.col("price") > 450.0, 1),
    ("in", [("id", "in", [5, 33])], pl.col("id").is_in([5, 33]), 2),
    ("in-none-match", [("id", "in", [-1, 999])], pl.col("id").is_in([-1, 999]), 0),
    ("not-in", [("id", "not in", [5, 6])], ~pl.col("id").is_in([5, 6]), None),
    ("is-null", [("price", "is null")], pl.col("price").is_null(), 1),
    ("is-null-3", [("price", "is null", None)], pl.col("price").is_null(), 1),
    ("is-not-null", [("name", "is not null")], pl.col("name").is_not_null(), N_BATCHES - 1),
    ("between", [("id", "between", (12, 25))], pl.col("id").is_between(12, 25), 2),
    ("between-edges", [("id", "between", (19, 20))], pl.col("id").is_between(19, 20), 2),
    ("date", [("day", ">=", date(2024, 1, 5))], pl.col("day") >= date(2024, 1, 5), 2),
    ("string-lt", [("name", "<", "n1")], pl.col("name") < "n1", 1),
    ("bool", [("flag", "=", True)], pl.col("flag") == True, 3),  # noqa: E712
    ("and", [("id", ">=", 10), ("id", "<", 30)], (pl.col("id") >= 10) & (pl.col("id") < 30), 2),
    ("and-disjoint", [("id", "<", 10), ("price", ">", 450.0)], (pl.col("id") < 10) & (pl.col("price") > 450.0), 0),
    ("or", [[("id", "<", 10)], [("id", ">=", 50)]], (pl.col("id") < 10) | (pl.col("id") >= 50), 2),
    ("or-and", [[("id", "<", 20), ("flag", "=", False)], [("price", "is null")]],
     ((pl.col("id") < 20) & (pl.col("flag") == False)) | pl.col("price").is_null(), 2),  # noqa: E712
    # `nostat` has statistics only under '*'
    ("or-with-unstated-column", [[("id", "<", 10)], [("nostat", "=", 990)]],
     (pl.col("id") < 10) | (pl.col("nostat") == 990), (N_BATCHES, 2)),
    ("unstated-column", [("nostat", "=", 995)], pl.col("nostat") == 995, (N_BATCHES, 1)),
    ("unstated-column-range", [("nostat", "<", 960)], pl.col("nostat") < 960, (N_BATCHES, 2)),
    ("unstated-is-null", [("raw", "is null")], pl.col("raw").is_null(), N_BATCHES),
    ("bytes-eq", [("raw", "=", b"r42")], pl.col("raw") == b"r42", N_BATCHES),
]


@pytest.mark.parametrize("stats", ["*", "id,price,name,day,flag", " id , price,name,day , flag "])
@pytest.mark.parametrize(("case", "filters", "predicate", "decoded"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filters_skip_batches_and_match_polars(conn: fl.Connection, counter: DecodeCounter, stats: str, case: str,
                                               filters: Any, predicate: pl.Expr,
                                               decoded: int | tuple[int, int] | None) -> None:
    if isinstance(decoded, tuple):
        decoded = decoded[1] if stats == "*" else decoded[0]
    table = make_stats_table(conn, "s", stats)
    full = table.scan_log()
    counter.reset()
    got = table.scan_log(filters=filters)
    assert_frame_equal(by_position(got), by_position(full.filter(predicate)))
    if decoded is not None:
        assert counter.calls == decoded, f"decoded {counter.calls} batches, expected {decoded}"
    else:
        assert counter.calls <= N_BATCHES
    # the same through a subscription
    counter.reset()
    scanner = table.new_scan(filters=filters)
    scanner.subscribe_from_beginning()
    assert_frame_equal(by_position(scanner.poll()), by_position(full.filter(predicate)))
    if decoded is not None:
        assert counter.calls == decoded


@pytest.mark.parametrize(("case", "filters", "predicate", "decoded"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filters_without_statistics_read_everything(conn: fl.Connection, counter: DecodeCounter, case: str,
                                                    filters: Any, predicate: pl.Expr, decoded: Any) -> None:
    table = make_stats_table(conn, "plain", None)
    full = table.scan_log()
    counter.reset()
    got = table.scan_log(filters=filters)
    assert_frame_equal(by_position(got), by_position(full.filter(predicate)))
    assert counter.calls == N_BATCHES  # no statistics: no batch may be skipped


def test_filter_with_projection_and_offsets(conn: fl.Connection, counter: DecodeCounter) -> None:
    table = make_stats_table(conn, "s", "*")
    counter.reset()
    got = table.scan_log(columns=["name"], filters=[("price", ">", 450.0)])
    assert got.columns == [*SYSTEM, "name"]
    assert got["name"].to_list() == [f"n5{i}" for i in range(10)]
    assert counter.calls == 1
    got = table.scan_log(start_offsets={0: 15}, end_offsets={0: 45}, filters=[("id", "between", (10, 52))])
    assert got["id"].to_list() == list(range(15, 45))
    assert got["_offset"].to_list() == list(range(15, 45))


def test_statistics_enabled_later_only_skip_new_batches(conn: fl.Connection, counter: DecodeCounter) -> None:
    conn.create_table("db.t", schema=STATS_SCHEMA)
    table = conn.get_table("db.t")
    for j in range(3):
        table.append(stats_batch(j))
    conn.alter_table("db.t", set_options={"table.statistics.columns": "id"})
    for j in range(3, N_BATCHES):
        table.append(stats_batch(j))
    full = table.scan_log()
    for filters, predicate, expected in [([("id", "=", 45)], pl.col("id") == 45, 3 + 1),
                                         ([("id", "=", 5)], pl.col("id") == 5, 3),
                                         ([("price", "=", 405.0)], pl.col("price") == 405.0, N_BATCHES)]:
        counter.reset()
        got = table.scan_log(filters=filters)
        assert_frame_equal(by_position(got), by_position(full.filter(predicate)))
        assert counter.calls == expected


def test_filters_on_new_column_after_alter(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema={"a": "INT"}, options={"table.statistics.columns": "*"})
    table = conn.get_table("db.t")
    table.append([{"a": 1}, {"a": 2}])
    conn.alter_table("db.t", add_columns={"b": "INT"})
    table.append([{"a": 3, "b": 30}])
    full = table.scan_log()
    for filters, predicate in [([("b", "is null")], pl.col("b").is_null()), ([("b", ">", 5)], pl.col("b") > 5),
                               ([("b", "is not null")], pl.col("b").is_not_null())]:
        assert_frame_equal(by_position(table.scan_log(filters=filters)), by_position(full.filter(predicate)))


def test_nan_values_are_never_skipped_wrongly(conn: fl.Connection) -> None:
    """Polars orders NaN above every number (``NaN > 5`` is true, ``NaN == NaN`` is true); batch statistics must not
    skip a batch whose NaN rows match (FLUSS-SEMANTICS 5.3: stats use the 3.5 max/min comparators, NaN largest)."""
    conn.create_table("db.t", schema={"x": "DOUBLE"}, options={"table.statistics.columns": "*"})
    table = conn.get_table("db.t")
    table.append([{"x": 1.0}, {"x": float("nan")}])
    table.append([{"x": 2.0}, {"x": None}])
    full = table.scan_log()
    for filters, predicate in [([("x", ">", 5.0)], pl.col("x") > 5.0), ([("x", ">=", 5.0)], pl.col("x") >= 5.0),
                               ([("x", "=", float("nan"))], pl.col("x") == float("nan")),
                               ([("x", "between", (3.0, float("inf")))], pl.col("x").is_between(3.0, float("inf"))),
                               ([("x", "in", [float("nan")])], pl.col("x").is_in([float("nan")]))]:
        assert_frame_equal(by_position(table.scan_log(filters=filters)), by_position(full.filter(predicate)),
                           check_exact=True)


def test_bad_filters(conn: fl.Connection) -> None:
    table = make_stats_table(conn, "s", "*")
    with pytest.raises(InvalidConfigError, match="'zz'"):
        table.scan_log(filters=[("zz", "=", 1)])
    with pytest.raises(InvalidConfigError, match="like"):
        table.scan_log(filters=[("id", "like", 1)])
    with pytest.raises(InvalidConfigError):
        table.new_scan(filters=[("id",)])  # type: ignore[list-item]


# ---------------------------------------------------------------------------------------------- out of range
def test_offsets_out_of_range(two_buckets: fl.Table) -> None:
    table = two_buckets
    with pytest.raises(OffsetOutOfRangeError, match="earliest") as err:
        table.scan_log(start_offsets={0: -1})
    assert err.value.retriable is False
    with pytest.raises(OffsetOutOfRangeError, match="latest"):
        table.scan_log(start_offsets={1: 16})  # after the log end (15)
    with pytest.raises(OffsetOutOfRangeError):
        table.scan_log(start_offsets={0: 100}, end_offsets={0: 200})
    # the log end itself is a valid (empty) start
    assert table.scan_log(start_offsets={0: 15, 1: 15}).height == 0


def test_scanner_offsets_out_of_range(two_buckets: fl.Table) -> None:
    scanner = two_buckets.new_scan()
    with pytest.raises(OffsetOutOfRangeError):
        scanner.subscribe(0, -5)
        scanner.poll()
    beyond = two_buckets.new_scan()
    with pytest.raises(OffsetOutOfRangeError):
        beyond.subscribe(1, 20)  # after the log end (15): nothing will ever be read from there
        beyond.poll()


def test_scan_unknown_bucket(two_buckets: fl.Table) -> None:
    with pytest.raises(FlussLakeError, match="bucket 7"):
        two_buckets.scan_log(start_offsets={7: 0})
    with pytest.raises(FlussLakeError, match="bucket 7"):
        two_buckets.scan_log(end_offsets={7: 1})


def test_empty_table_scans(conn: fl.Connection) -> None:
    conn.create_table("db.t", schema={"a": "INT", "b": "STRING"}, bucket_num=3)
    table = conn.get_table("db.t")
    scanned = table.scan_log(columns=["b"], filters=[("a", ">", 1)])
    assert scanned.height == 0 and scanned.columns == [*SYSTEM, "b"]
    assert table.to_polars().schema == pl.Schema({"a": pl.Int32, "b": pl.String})
    scanner = table.new_scan()
    scanner.subscribe_from_beginning()
    assert scanner.poll().height == 0
    assert table.end_offsets() == table.earliest_offsets() == {0: 0, 1: 0, 2: 0}
    assert list(itertools.chain(table.scan_log(start_offsets={0: 0, 1: 0, 2: 0}).columns)) == [*SYSTEM, "a", "b"]


@pytest.mark.parametrize(("filters", "column"), [
    ([("id", "=", "abc")], "id"),
    ([("name", ">", 5)], "name"),
    ([("day", ">=", "2024-01-01")], "day"),
    ([("id", "in", 5)], "id"),
    ([("id", "not in", 5)], "id"),
    ([("id", "in", ["a", "b"])], "id"),
    ([("id", "between", 5)], "id"),
    ([("id", "between", (1,))], "id"),
    ([("id", "between", (1, 2, 3))], "id"),
], ids=repr)
def test_bad_filter_values(conn: fl.Connection, filters: Any, column: str) -> None:
    """A filter value that cannot be compared with its column is a configuration error naming the column, raised
    by fluss-lake (not a raw Polars/Python error from deep inside the scan)."""
    table = make_stats_table(conn, "s", "*")
    with pytest.raises(InvalidConfigError, match=f"'{column}'"):
        table.scan_log(filters=filters)
    with pytest.raises(InvalidConfigError, match=f"'{column}'"):
        scanner = table.new_scan(filters=filters)
        scanner.subscribe_from_beginning()
        scanner.poll()


def test_filter_on_ltz_column_needs_aware_datetime(conn: fl.Connection) -> None:
    from datetime import datetime, timezone

    conn.create_table("db.t", schema={"ts": "TIMESTAMP_LTZ(3)"}, options={"table.statistics.columns": "*"})
    table = conn.get_table("db.t")
    table.append([{"ts": datetime(2024, 6, 1, tzinfo=timezone.utc)}])
    assert table.scan_log(filters=[("ts", ">", datetime(2024, 5, 1, tzinfo=timezone.utc))]).height == 1
    with pytest.raises(InvalidConfigError, match="'ts'"):
        table.scan_log(filters=[("ts", ">", datetime(2024, 5, 1))])
