"""The compiled row gather returns exactly ``arrays[seg][row]`` (None where not found or null) for every type it
handles: integers of each width, floats, dates, times, timestamps, strings and binaries (32- and 64-bit offsets,
sliced arrays, nulls, empty strings), in any visiting order; it declines types it does not handle and columns
whose type differs between segments (the caller falls back to Arrow)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_lake.kv import row_gather

TYPES = {
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int16": (pa.int16(), st.integers(-2**15, 2**15 - 1)),
    "int32": (pa.int32(), st.integers(-2**31, 2**31 - 1)),
    "int64": (pa.int64(), st.integers(-2**63, 2**63 - 1)),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "float64": (pa.float64(), st.floats(allow_nan=False)),
    "date32": (pa.date32(), st.dates()),
    "time64": (pa.time64("us"), st.times()),
    "timestamp": (pa.timestamp("us", tz="UTC"), st.datetimes(timezones=st.just(dt.UTC))),
    "string": (pa.string(), st.text(max_size=12)),
    "large_string": (pa.large_string(), st.text(max_size=12)),
    "binary": (pa.binary(), st.binary(max_size=12)),
    "large_binary": (pa.large_binary(), st.binary(max_size=12)),
}


@st.composite
def segments_and_queries(draw):
    kind, values = TYPES[draw(st.sampled_from(sorted(TYPES)))]
    arrays = []
    for _ in range(draw(st.integers(1, 4))):
        items = draw(st.lists(st.one_of(st.none(), values), min_size=1, max_size=30))
        array = pa.array(items, type=kind)
        cut = draw(st.integers(0, len(items) - 1))  # sliced arrays carry an offset into their buffers
        arrays.append(array.slice(cut))
    n = draw(st.integers(0, 60))
    seg_of = np.array([draw(st.integers(-1, len(arrays) - 1)) for _ in range(n)], dtype=np.int64)
    row_of = np.array([draw(st.integers(0, len(arrays[s]) - 1)) if s >= 0 else 0 for s in seg_of], dtype=np.int64)
    order = np.random.default_rng(draw(st.integers(0, 99))).permutation(n).astype(np.int64)
    return kind, arrays, seg_of, row_of, order


@settings(max_examples=300, deadline=None)
@given(segments_and_queries())
def test_gather_equals_arrow_indexing(case) -> None:
    kind, arrays, seg_of, row_of, order = case
    found = seg_of >= 0
    involved = sorted({int(s) for s in seg_of if s >= 0}) or [0]
    out = row_gather.gather_column(arrays, involved, seg_of, row_of, order, found, bool(found.all()))
    assert out is not None and len(out) == len(seg_of)
    want = [arrays[s][r].as_py() if s >= 0 else None for s, r in zip(seg_of.tolist(), row_of.tolist())]
    assert out.to_pylist() == want
    assert out.type in (kind, pa.large_string(), pa.large_binary())


@settings(max_examples=200, deadline=None)
@given(segments_and_queries(), st.booleans())
def test_a_column_plan_gathers_what_the_per_call_gather_does(case, all_segments) -> None:
    """The plan made once for a list of segments (every segment's buffers, nulls anywhere) gives, call after call,
    exactly the per-call gather's array, whichever segments the queries touch."""
    kind, arrays, seg_of, row_of, order = case
    found = seg_of >= 0
    involved = list(range(len(arrays))) if all_segments else sorted({int(s) for s in seg_of if s >= 0}) or [0]
    plan = row_gather.ColumnPlan.of(arrays)
    assert plan is not None
    want = row_gather.gather_column(arrays, involved, seg_of, row_of, order, found, bool(found.all()))
    for _ in range(2):  # the plan is reused, not consumed
        got = plan.gather(seg_of, row_of, order, found, bool(found.all()))
        assert got.type == want.type and got.to_pylist() == want.to_pylist()


def test_a_column_plan_declines_what_the_gather_declines() -> None:
    assert row_gather.ColumnPlan.of([pa.array([True, False])]) is None
    assert row_gather.ColumnPlan.of([pa.array([1], pa.int32()), pa.array([1], pa.int64())]) is None
    assert row_gather.ColumnPlan.of([pa.array([1], pa.int64()), pa.array([], pa.int64())]) is not None


def test_declines_other_types_and_mixed_types() -> None:
    seg_of, row_of, order = np.zeros(2, np.int64), np.array([0, 1], np.int64), np.arange(2, dtype=np.int64)
    found = np.ones(2, bool)
    for array in (pa.array([True, False]), pa.array([[1], [2]]), pa.array([1, 2], pa.decimal128(5, 2))):
        assert row_gather.gather_column([array], [0], seg_of, row_of, order, found, True) is None
    mixed = [pa.array([1, 2], pa.int32()), pa.array([1, 2], pa.int64())]
    assert row_gather.gather_column(mixed, [0, 1], np.array([0, 1], np.int64), row_of, order, found, True) is None


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
def test_gather_numpy(dtype) -> None:
    arrays = [np.arange(10, dtype=dtype), None, np.arange(100, 110, dtype=dtype)]
    seg_of = np.array([2, -1, 0, 2], dtype=np.int64)
    row_of = np.array([3, 0, 9, 0], dtype=np.int64)
    out = row_gather.gather_numpy(arrays, seg_of, row_of, np.arange(4, dtype=np.int64)[::-1].copy(), np.dtype(dtype))
    assert out.tolist() == [103, 0, 9, 100]


@settings(max_examples=150, deadline=None)
@given(segments_and_queries())
def test_take_rows_keeps_the_source_type(case) -> None:
    kind, arrays, seg_of, row_of, _ = case
    seg_of = np.maximum(seg_of, 0)
    row_of = np.array([min(r, len(arrays[s]) - 1) for s, r in zip(seg_of, row_of)], dtype=np.int64)
    out = row_gather.take_rows(arrays, seg_of, row_of)
    assert out.type == kind
    assert out.to_pylist() == [arrays[s][r].as_py() for s, r in zip(seg_of.tolist(), row_of.tolist())]


def test_take_rows_falls_back_for_other_types() -> None:
    columns = [pa.array([True, None]), pa.array([False])]
    out = row_gather.take_rows(columns, np.array([1, 0, 0]), np.array([0, 1, 0]))
    assert out.to_pylist() == [False, None, True]
