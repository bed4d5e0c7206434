"""``fluss_lake._utils.frames.to_arrow`` gives exactly ``DataFrame.to_arrow()`` for every column type we store."""

from __future__ import annotations

import datetime as dt
import decimal

import polars as pl
import pytest

from fluss_lake._utils import frames


def _every_type(rows: int) -> pl.DataFrame:
    one = pl.DataFrame(
        {
            "i8": pl.Series([1, None, 3], dtype=pl.Int8),
            "i64": [1, 2, None],
            "u32": pl.Series([1, 2, 3], dtype=pl.UInt32),
            "f": [1.0, None, 2.5],
            "b": [True, None, False],
            "s": ["a", None, "ccc"],
            "bin": [b"x", None, b""],
            "d": [dt.date(2020, 1, 1), None, dt.date(2021, 1, 1)],
            "ts": [dt.datetime(2020, 1, 1), None, dt.datetime(2020, 1, 2, 3, 4, 5, 6)],
            "tsz": pl.Series([dt.datetime(2020, 1, 1)] * 3).dt.replace_time_zone("UTC").dt.cast_time_unit("ms"),
            "t": [dt.time(1, 2), None, dt.time(3, 4)],
            "dec": pl.Series([decimal.Decimal("1.10"), None, decimal.Decimal("2.25")], dtype=pl.Decimal(10, 2)),
            "l": [[1, 2], None, []],
            "ls": [["a"], ["b", None], None],
            "st": [{"a": 1, "b": "x"}, None, {"a": 2, "b": None}],
            "arr": pl.Series([[1, 2], [3, 4], None], dtype=pl.Array(pl.Int32, 2)),
            "dur": [dt.timedelta(1), None, dt.timedelta(2)],
            "nul": [None, None, None],
        }
    )
    return pl.concat([one] * (rows // 3 + 1), rechunk=False).head(rows)  # several chunks


@pytest.mark.parametrize("rows", [0, 1, 7, frames.SMALL_ROWS + 1])
def test_the_same_table_as_polars_gives(rows):
    frame = _every_type(rows)
    got, want = frames.to_arrow(frame), frame.to_arrow()
    assert got.schema == want.schema
    assert got.equals(want)


def test_a_frame_without_columns():
    assert frames.to_arrow(pl.DataFrame()).equals(pl.DataFrame().to_arrow())


def test_nan_stays_nan():
    frame = pl.DataFrame({"f": [1.0, float("nan"), None]})
    got = frames.to_arrow(frame)
    assert got.schema == frame.to_arrow().schema
    assert pl.from_arrow(got).equals(frame)  # Polars compares NaN as equal to NaN (Arrow's equals does not)
    assert got.column("f").to_pylist()[1] != got.column("f").to_pylist()[1]
