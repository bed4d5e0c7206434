"""`distinct` keeps exactly the rows `DataFrame.unique(..., maintain_order=True)` keeps, for any keys (nulls,
strings, floats, repeated keys, colliding hashes), with the first or last row of each key."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_lake._utils import distinct as distinct_module
from fluss_lake._utils.distinct import distinct

rows = st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 3)), st.sampled_from(["a", "b", None]),
                          st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, float("nan")])),
                          st.integers(0, 1000)), max_size=40)


def _frame(data: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(data, schema={"k": pl.Int64, "s": pl.String, "f": pl.Float64, "v": pl.Int64}, orient="row")


@settings(max_examples=200, deadline=None)
@given(rows, st.sampled_from([["k"], ["k", "s"], ["s"], ["f"], ["k", "f"], None]),
       st.sampled_from(["first", "last", "any"]))
def test_distinct_equals_unique(data: list[tuple], subset: list[str] | None, keep: str) -> None:
    frame = _frame(data)
    expected = frame.unique(subset=subset, keep="first" if keep == "any" else keep, maintain_order=True)
    assert distinct(frame, subset, keep=keep).equals(expected)  # type: ignore[arg-type]


int_rows = st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2), st.integers(0, 1000)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(int_rows, st.sampled_from([["k"], ["k", "j"], ["j", "k"], None]), st.sampled_from(["first", "last", "any"]),
       st.sampled_from([pl.Int64, pl.UInt8, pl.Int32]))
def test_integer_keys_equal_unique(data: list[tuple], subset: list[str] | None, keep: str, dtype: pl.DataType) -> None:
    """Integer keys without nulls take the numpy path: the same rows as ``unique``."""
    frame = pl.DataFrame([(abs(k) if dtype == pl.UInt8 else k, j, v) for k, j, v in data],
                         schema={"k": dtype, "j": pl.Int64, "v": pl.Int64}, orient="row")
    expected = frame.unique(subset=subset, keep="first" if keep == "any" else keep, maintain_order=True)
    assert distinct(frame, subset, keep=keep).equals(expected)  # type: ignore[arg-type]


def test_colliding_integer_mixes_keep_distinct_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several integer keys all mixing alike (forced) still give each distinct key its own row."""
    monkeypatch.setattr(distinct_module, "_mix", lambda keys: keys[0].astype("uint64") * 0)
    frame = pl.DataFrame({"a": [1, 2, 1, 3, 2], "b": [0, 0, 0, 0, 1], "v": [10, 20, 30, 40, 50]})
    assert distinct(frame, ["a", "b"], keep="last").get_column("v").to_list() == [20, 30, 40, 50]
    assert distinct(frame, ["a", "b"]).get_column("v").to_list() == [10, 20, 40, 50]
    assert distinct(frame.filter(pl.col("v") != 30), ["a", "b"]).height == 4


def test_colliding_hashes_keep_distinct_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key hashing alike (forced) still gives each distinct key its own row: the exact step decides."""
    real = pl.Expr.hash
    monkeypatch.setattr(pl.Expr, "hash", lambda self, *a, **k: real(self, *a, **k) * 0)
    frame = pl.DataFrame({"k": [1, 2, 1, 3, 2], "v": [10, 20, 30, 40, 50]})
    assert distinct(frame, ["k"], keep="last").to_dicts() == [{"k": 1, "v": 30}, {"k": 3, "v": 40},
                                                              {"k": 2, "v": 50}]
    assert distinct(frame, ["k"]).get_column("v").to_list() == [10, 20, 40]
    assert distinct_module.distinct(frame.head(1), ["k"]).height == 1


def test_no_repeats_returns_the_frame_itself() -> None:
    frame = pl.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    assert distinct(frame, ["a", "b"]) is frame
