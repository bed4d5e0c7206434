"""Keys of lookups and values of filters follow the rules of writes: what a write refuses, they refuse too.

Dates and timestamps outside years 1 to 9999 (an Arrow ``timestamp[s]`` of 10**15 s, a Polars frame already of the
column's type) used to come back from a lookup as values that panic in Rust when printed; a bool filter value
matched an INT column's 1, and a dict for a ROW column with an unknown or mistyped field was compared anyway. Each
bad value here is refused by a write (``SchemaMismatchError``), a lookup (the same) and a filter
(``InvalidConfigError`` naming the column), and nothing is written; the good ones (Arrow scalars, dicts whose
integer fields fit the ROW) work in all three.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

import fluss_lake as fl

ADDRESS = pl.Struct({"zip": pl.Int32, "city": pl.String})
FAR_MS = 10**15 * 1000  # 10**15 s after the epoch, in milliseconds: far past year 9999


@pytest.fixture
def conn(tmp_path) -> fl.Connection:
    conn = fl.connect(str(tmp_path / "store"))
    conn.create_database("d")
    conn.create_table("d.ts", schema={"ts": "TIMESTAMP(3)", "v": "INT"}, primary_key=["ts"], bucket_num=2)
    conn.create_table("d.day", schema={"d": "DATE", "v": "INT"}, primary_key=["d"])
    conn.create_table("d.num", schema={"k": "INT", "v": "INT"}, primary_key=["k"])
    conn.create_table("d.events", schema={"ts": "TIMESTAMP(3)", "v": "INT", "ok": "BOOLEAN", "addr": ADDRESS},
                      options={"table.statistics.columns": "ts,v"})
    conn.get_table("d.ts").upsert([{"ts": dt.datetime(2024, 1, 1), "v": 1}])
    conn.get_table("d.day").upsert([{"d": dt.date(2024, 1, 1), "v": 1}])
    conn.get_table("d.num").upsert([{"k": 1, "v": 1}])
    conn.get_table("d.events").append([{"ts": dt.datetime(2024, 1, 1), "v": 1, "ok": True, "addr": {"zip": 1}},
                                       {"ts": dt.datetime(2024, 1, 2), "v": 2, "ok": False, "addr": None}])
    return conn


def _far_polars(unit: str = "ms") -> pl.Series:
    return pl.Series("ts", [FAR_MS], dtype=pl.Int64).cast(pl.Datetime(unit))


#: (case, table, rows a write is given, lookup keys) for keys out of range or of the wrong kind
BAD_KEYS: list[tuple[str, str, Callable[[], Any], Callable[[], Any]]] = [
    ("arrow timestamp[s] 10**15", "ts",
     lambda: pa.table({"ts": pa.array([10**15], pa.timestamp("s")), "v": pa.array([1], pa.int32())}),
     lambda: pa.table({"ts": pa.array([10**15], pa.timestamp("s"))})),
    ("arrow record batches", "ts",
     lambda: pa.table({"ts": pa.array([10**15], pa.timestamp("s")), "v": pa.array([1], pa.int32())}).to_batches(),
     lambda: pa.table({"ts": pa.array([10**15], pa.timestamp("s"))}).to_batches()),
    ("polars frame of the column's type", "ts",
     lambda: pl.DataFrame([_far_polars(), pl.Series("v", [1], pl.Int32)]), lambda: pl.DataFrame([_far_polars()])),
    ("polars frame in microseconds", "ts",
     lambda: pl.DataFrame([_far_polars("us"), pl.Series("v", [1], pl.Int32)]),
     lambda: pl.DataFrame([_far_polars("us")])),
    ("arrow date32 far away", "day",
     lambda: pa.table({"d": pa.array([10**8], pa.date32()), "v": pa.array([1], pa.int32())}),
     lambda: pa.table({"d": pa.array([10**8], pa.date32())})),
    ("polars DATE of the column's type", "day",
     lambda: pl.DataFrame([pl.Series("d", [10**8], pl.Int32).cast(pl.Date), pl.Series("v", [1], pl.Int32)]),
     lambda: pl.DataFrame([pl.Series("d", [10**8], pl.Int32).cast(pl.Date)])),
    ("a bool for an INT key", "num", lambda: [{"k": True, "v": 1}], lambda: [{"k": True}]),
]


@pytest.mark.parametrize(("case", "name", "rows", "keys"), BAD_KEYS, ids=[c[0] for c in BAD_KEYS])
def test_a_lookup_refuses_the_keys_a_write_refuses(conn: fl.Connection, case, name, rows, keys) -> None:
    table = conn.get_table(f"d.{name}")
    before = (table.to_polars(), table.end_offsets())
    with pytest.raises(fl.SchemaMismatchError) as written:
        table.upsert(rows())
    with pytest.raises(fl.SchemaMismatchError) as looked_up:
        table.lookup(keys())
    assert str(looked_up.value) == str(written.value)  # the same words for the same value
    if name != "num":
        assert "outside the years 1 to 9999" in str(written.value)
    after = (table.to_polars(), table.end_offsets())
    assert after[0].equals(before[0]) and after[1] == before[1]


def test_lookup_one_and_prefix_keys_follow_the_same_rules(conn: fl.Connection) -> None:
    conn.create_table("d.pre", schema={"d": "DATE", "n": "INT", "v": "INT"}, primary_key=["d", "n"],
                      bucket_keys=["d"])
    pre = conn.get_table("d.pre")
    pre.upsert([{"d": dt.date(2024, 1, 1), "n": 1, "v": 1}])
    with pytest.raises(fl.SchemaMismatchError, match="outside the years"):
        pre.prefix_lookup(pl.DataFrame([pl.Series("d", [10**8], pl.Int32).cast(pl.Date)]))
    with pytest.raises(fl.SchemaMismatchError, match="Boolean"):
        conn.get_table("d.num").new_lookup().lookup_one({"k": True})
    assert pre.prefix_lookup([{"d": dt.date(2024, 1, 1)}])["v"].to_list() == [1]  # in range: found as before
    assert conn.get_table("d.ts").lookup(pl.DataFrame({"ts": [dt.datetime(2024, 1, 1)]}).cast(
        {"ts": pl.Datetime("ms")}))["v"].to_list() == [1]


#: (case, filter, the write a filter value corresponds to) for filter values a write would refuse
BAD_FILTERS: list[tuple[str, list, list[dict]]] = [
    ("a bool for an INT column", [("v", "=", True)], [{"v": True}]),
    ("bools among INT values", [("v", "in", [True, 2])], [{"v": True}, {"v": 2}]),
    ("a number for a BOOLEAN column", [("ok", "=", 1)], [{"ok": 1}]),
    ("an Arrow timestamp[s] of 10**15", [("ts", "<", pa.scalar(10**15, pa.timestamp("s")))],
     pa.table({"ts": pa.array([10**15], pa.timestamp("s"))})),
    ("an unknown ROW field", [("addr", "=", {"zip": 1, "street": "s"})], [{"addr": {"zip": 1, "street": "s"}}]),
    ("a string for a ROW's INT field", [("addr", "=", {"zip": "1"})], [{"addr": {"zip": "1"}}]),
    ("a ROW's INT field too large", [("addr", "=", {"zip": 2**40})], [{"addr": {"zip": 2**40}}]),
    ("a string for a TIMESTAMP column", [("ts", ">=", "2024-01-01")], [{"ts": "2024-01-01"}]),
]


@pytest.mark.parametrize(("case", "filters", "rows"), BAD_FILTERS, ids=[c[0] for c in BAD_FILTERS])
def test_a_filter_refuses_the_values_a_write_refuses(conn: fl.Connection, case, filters, rows) -> None:
    events = conn.get_table("d.events")
    before = events.scan_log()
    with pytest.raises(fl.SchemaMismatchError):
        events.append(rows)
    column = filters[0][0]
    with pytest.raises(fl.InvalidConfigError, match=f"filter on '{column}'"):
        events.scan_log(filters=filters)
    with pytest.raises(fl.InvalidConfigError, match=f"filter on '{column}'"):
        events.new_scan(filters=filters)
    with pytest.raises(fl.InvalidConfigError, match=f"filter on '{column}'"):
        events.scan_log(filters=[[("v", ">", 100)], filters])  # inside an OR of groups too
    assert events.scan_log().equals(before)


@pytest.mark.parametrize(("filters", "want"), [
    ([("ts", "=", pa.scalar(dt.datetime(2024, 1, 1), pa.timestamp("ms")))], [1]),  # an Arrow scalar is a value
    ([("ts", "<", pa.scalar(dt.datetime(2024, 1, 2), pa.timestamp("s")))], [1]),
    ([("v", "in", [pa.scalar(2, pa.int64()), 5])], [2]),
    ([("addr", "=", {"zip": 1})], [1]),  # a dict's int field into ROW<zip INT>: cast as in writes
    ([("addr", "=", {"zip": 1, "city": None})], [1]),
    ([("ts", ">=", dt.date(2024, 1, 2))], [2]),  # a DATE value for a TIMESTAMP column, as writes allow
    ([("ok", "=", True)], [1]),
    ([("v", "<", 1.5)], [1]),  # numbers compare as given: a fraction bounds an INT column
    ([[("v", "=", 7)], [("ts", ">", dt.datetime(2024, 1, 1, 12))]], [2]),
], ids=repr)
def test_good_filter_values_work(conn: fl.Connection, filters, want) -> None:
    events = conn.get_table("d.events")
    assert sorted(events.scan_log(filters=filters)["v"].to_list()) == want
    scanner = events.new_scan(filters=filters)
    scanner.subscribe_from_beginning()
    assert sorted(scanner.poll()["v"].to_list()) == want


def test_a_training_set_refuses_prediction_times_a_write_refuses(conn: fl.Connection) -> None:
    """Prediction times past year 9999 (already of Polars' type) used to panic inside Polars; now they are refused
    like a write of them, and a good row still gets its features."""
    from fluss_lake.training import FeatureView, training_set

    view = FeatureView.from_table(conn.get_table("d.num"))
    far = pl.Series("prediction_ts", [FAR_MS], pl.Int64).cast(pl.Datetime("ms", "UTC"))
    with pytest.raises(fl.SchemaMismatchError, match="outside the years 1 to 9999"):
        training_set(pl.DataFrame({"k": [1]}).with_columns(far), view)
    now = pl.Series("prediction_ts", [dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)])
    assert training_set(pl.DataFrame({"k": [1]}).with_columns(now), view)["v"].to_list() == [1]
