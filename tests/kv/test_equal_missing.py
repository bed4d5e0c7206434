"""The numpy (numbers) and Arrow (strings, binaries, booleans, dates) comparisons behind skip-unchanged writes equal
Polars' ``eq_missing`` with nulls, NaN, signed zeros, extreme integers, sliced and chunked columns."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_lake.kv.kv_tablet import _equal_missing

_VALUES = {
    pl.Float64: [None, float("nan"), -0.0, 0.0, 1.5, float("inf")],
    pl.Float32: [None, float("nan"), -0.0, 0.0, 1.5],
    pl.Int64: [None, 0, -1, 2**63 - 1, 2**53, 2**53 + 1],
    pl.UInt64: [None, 0, 1, 2**63, 2**64 - 1],
    pl.Int8: [None, -128, 0, 127],
    pl.String: [None, "", "a"],
    pl.Binary: [None, b"", b"a", b"\x00"],
    pl.Boolean: [None, True, False],
    pl.Date: [None, 0, 19000, -1],
}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(_VALUES)), st.data(), st.integers(0, 2), st.booleans())
def test_equal_missing_equals_polars(dtype: pl.DataType, data: st.DataObject, cut: int, chunked: bool) -> None:
    n = data.draw(st.integers(0, 12))
    values = st.lists(st.sampled_from(_VALUES[dtype]), min_size=n, max_size=n)  # type: ignore[index]
    left, right = (pl.Series(data.draw(values), dtype=dtype) for _ in range(2))
    left, right = left.slice(min(cut, n)), right.slice(min(cut, n))
    if chunked:
        left, right = pl.concat([left, left], rechunk=False), pl.concat([right, right], rechunk=False)
    assert _equal_missing(left, right).tolist() == left.eq_missing(right).to_list()
