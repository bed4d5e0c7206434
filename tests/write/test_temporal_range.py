"""Dates and timestamps outside years 1 to 9999 are refused with a clear error and change nothing.

Polars would otherwise wrap an Arrow ``timestamp[s]`` that overflows milliseconds into another instant, and a
value past year 9999 panics in Rust (``PanicException``, not a ``FlussLakeError``) when read back as Python.
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pyarrow as pa
import pytest

import fluss_lake as fl


@pytest.fixture
def tables(tmp_path) -> tuple[fl.Table, fl.Table]:
    conn = fl.connect(str(tmp_path / "store"))
    conn.create_database("d")
    conn.create_table("d.log", schema={"ts": "TIMESTAMP(3)", "day": "DATE"})
    conn.create_table("d.pk", schema={"id": "INT", "ts": "TIMESTAMP_LTZ(6)"}, primary_key=["id"])
    log, pk = conn.get_table("d.log"), conn.get_table("d.pk")
    log.append([{"ts": dt.datetime(2026, 1, 1), "day": dt.date(2026, 1, 1)}])
    pk.upsert([{"id": 1, "ts": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}])
    return log, pk


@pytest.mark.parametrize("seconds", [10**15, 10**17, -(10**17), 253_402_300_800, -62_135_596_801])
def test_arrow_timestamps_outside_the_range_are_refused(tables, seconds: int) -> None:
    log, pk = tables
    before = (log.to_polars(), log.end_offsets())
    bad = pa.table({"ts": pa.array([1, seconds], pa.timestamp("s")),
                    "day": pa.array([dt.date(2026, 1, 2)] * 2, pa.date32())})
    with pytest.raises(fl.SchemaMismatchError, match="column 'ts' has date/time values outside the years 1 to 9999"):
        log.append(bad)
    with pytest.raises(fl.SchemaMismatchError, match="outside the years 1 to 9999"):
        log.append(bad.to_batches())
    with pytest.raises(fl.SchemaMismatchError, match="outside the years 1 to 9999"):
        pk.upsert(pa.table({"id": pa.array([2], pa.int32()), "ts": pa.array([seconds], pa.timestamp("s", "UTC"))}))
    assert log.to_polars().equals(before[0]) and log.end_offsets() == before[1]
    assert pk.to_polars()["id"].to_list() == [1]


def test_the_edges_of_the_range_are_accepted_and_read_back(tables) -> None:
    log, _ = tables
    edges = pa.table({"ts": pa.array([-62_135_596_800, 253_402_300_799], pa.timestamp("s")),
                      "day": pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31)], pa.date32())})
    log.append(edges)
    rows = log.to_polars().tail(2).to_dicts()  # back as Python values, no panic
    assert rows == [{"ts": dt.datetime(1, 1, 1), "day": dt.date(1, 1, 1)},
                    {"ts": dt.datetime(9999, 12, 31, 23, 59, 59), "day": dt.date(9999, 12, 31)}]


def test_polars_and_arrow_dates_outside_the_range_are_refused(tables) -> None:
    log, _ = tables
    before = log.end_offsets()
    far = pl.DataFrame({"ts": [dt.datetime(2026, 1, 1)], "day": pl.Series([3_000_000], dtype=pl.Int32).cast(pl.Date)})
    with pytest.raises(fl.SchemaMismatchError, match="column 'day'"):
        log.append(far)
    with pytest.raises(fl.SchemaMismatchError, match="column 'day'"):
        log.append(pa.table({"ts": pa.array([0], pa.timestamp("ms")), "day": pa.array([-800_000], pa.date32())}))
    assert log.end_offsets() == before
