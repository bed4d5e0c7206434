"""Unit tests of the aggregation merge engine and of every aggregate function."""

from __future__ import annotations

import math
import struct
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import polars as pl
import pytest
from pyroaring import BitMap, BitMap64

from fluss_lake.exceptions import DeletionDisabledError, InvalidConfigError, SchemaMismatchError
from fluss_lake.kv.merge import (
    AGG_FUNCTIONS,
    EMIT_DELETE,
    EMIT_INSERT,
    EMIT_NOTHING,
    EMIT_UPDATE,
    AggSpec,
    MergeRound,
    MergeSpec,
    create_aggregator,
    create_row_merger,
    normalize_function_name,
    validate_aggregation,
)

Row = dict[str, Any]


def agg(function: str, dtype: pl.DataType, acc: list[Any], inp: list[Any], **params: str) -> list[Any]:
    """Apply one aggregate function to aligned accumulator and input values."""
    f = create_aggregator("c", dtype, AggSpec(function, params))
    out = f(series(acc, dtype), series(inp, dtype))
    assert out.dtype == dtype
    return out.to_list()


def series(values: list[Any], dtype: pl.DataType) -> pl.Series:
    """Build a Series; decimals go through strings (Polars infers a too-small precision from Decimal objects)."""
    if isinstance(dtype, pl.Decimal):
        return pl.Series([None if v is None else str(v) for v in values], dtype=pl.String).cast(dtype)
    return pl.Series(values, dtype=dtype)


def bits(x: float) -> int:
    """Bit pattern of a double, to tell -0.0 from 0.0."""
    return struct.unpack(">q", struct.pack(">d", x))[0]


def table(**aggregations: str) -> MergeSpec:
    """Aggregation table ``id, a BIGINT, b INT, s STRING`` with the given functions."""
    dtypes = {"id": pl.Int32, "a": pl.Int64, "b": pl.Int32, "s": pl.String}
    return MergeSpec(columns=tuple(dtypes), dtypes=dtypes, nullable={c: c != "id" for c in dtypes},
                     primary_key=("id",), merge_engine="aggregation", delete_behavior="ignore",
                     aggregations={c: AggSpec(f) for c, f in aggregations.items()})


def with_behavior(spec: MergeSpec, behavior: str) -> MergeSpec:
    """Copy of ``spec`` with another delete behavior."""
    return MergeSpec(columns=spec.columns, dtypes=spec.dtypes, nullable=spec.nullable, primary_key=spec.primary_key,
                     merge_engine=spec.merge_engine, delete_behavior=behavior,  # type: ignore[arg-type]
                     aggregations=spec.aggregations)


def run(spec: MergeSpec, rows: list[tuple[Row | None, Row, bool]], targets: list[str] | None = None
        ) -> list[tuple[int, bool, Row]]:
    """Merge one round of (stored row or None, written row, is_delete) through the aggregation engine."""
    old = pl.DataFrame([o or {} for o, _, _ in rows], schema=spec.dtypes)
    new = pl.DataFrame([n for _, n, _ in rows], schema=spec.dtypes)
    out = create_row_merger(spec, target_columns=targets).merge(MergeRound(
        old, pl.Series([o is not None for o, _, _ in rows]), new, pl.Series([d for _, _, d in rows])))
    assert out.after.schema == pl.Schema(spec.dtypes)
    return list(zip(out.emit.to_list(), out.after_exists.to_list(), out.after.to_dicts(), strict=True))


# ---------------------------------------------------------------- sum / product


def test_sum_wraps_like_java() -> None:
    assert agg("sum", pl.Int32, [2**31 - 1, -(2**31)], [1, -1]) == [-(2**31), 2**31 - 1]
    assert agg("sum", pl.Int64, [2**63 - 1, -(2**63)], [1, -1]) == [-(2**63), 2**63 - 1]
    assert agg("sum", pl.Int8, [127], [1]) == [-128]
    assert agg("sum", pl.Int16, [32767], [2]) == [-32767]


def test_sum_ignores_nulls() -> None:
    assert agg("sum", pl.Int32, [None, 5, None], [3, None, None]) == [3, 5, None]
    assert agg("sum", pl.Float64, [10.5, None], [None, 1.5]) == [10.5, 1.5]


def test_sum_float32_stays_single_precision() -> None:
    out = agg("sum", pl.Float32, [0.1], [0.2])
    assert out[0] == pytest.approx(0.3, rel=1e-6)
    assert struct.pack("<f", out[0]) == struct.pack("<f", 0.30000001192092896)


def test_sum_decimal_narrow_is_exact() -> None:
    d = pl.Decimal(10, 2)
    acc, inp = [Decimal("1.23"), Decimal("-0.01"), None], [Decimal("4.56"), Decimal("0.01"), Decimal("7")]
    assert agg("sum", d, acc, inp) == [Decimal("5.79"), Decimal("0.00"), Decimal("7.00")]
    assert agg("sum", d, [Decimal("0.10")] * 2, [Decimal("0.20"), Decimal("99999999.89")]) == [
        Decimal("0.30"), Decimal("99999999.99")]


def test_sum_decimal_past_precision_is_null() -> None:
    # Deviation (see aggregators._decimal_sum): Fluss keeps an 11-digit long in a DECIMAL(10, 2); we store null.
    assert agg("sum", pl.Decimal(10, 2), [Decimal("99999999.99")], [Decimal("0.01")]) == [None]
    near = Decimal(10**18 - 1)
    assert agg("sum", pl.Decimal(18, 0), [near, near], [Decimal(1), -near]) == [None, Decimal(0)]


def test_sum_decimal_wide_overflow_is_null() -> None:
    d = pl.Decimal(38, 2)
    top, neg_top = Decimal("9" * 36 + ".99"), Decimal("-" + "9" * 36 + ".99")  # no `-top`: context rounds it
    assert agg("sum", d, [top, top, Decimal("1.00")], [Decimal("0.01"), neg_top, Decimal("2.50")]) == [
        None, Decimal("0.00"), Decimal("3.50")]
    assert agg("sum", pl.Decimal(20, 0), [Decimal(10**19)], [Decimal(9 * 10**19)]) == [None]
    assert agg("sum", d, [neg_top], [neg_top]) == [None]


def test_product_integer_and_double() -> None:
    assert agg("product", pl.Int32, [65536, 3, None], [65536, -4, 2]) == [0, -12, 2]
    assert agg("product", pl.Int64, [2**62], [4]) == [0]
    assert agg("product", pl.Float64, [0.9], [0.8]) == [0.7200000000000001]


def test_product_decimal_rounds_half_up() -> None:
    d = pl.Decimal(10, 2)
    acc = [Decimal("1.05"), Decimal("-1.05"), Decimal("1.25"), Decimal("0.01")]
    inp = [Decimal("1.50"), Decimal("1.50"), Decimal("1.01"), Decimal("0.49")]
    # 1.575 -> 1.58, -1.575 -> -1.58 (away from zero), 1.2625 -> 1.26, 0.0049 -> 0.00
    assert agg("product", d, acc, inp) == [Decimal("1.58"), Decimal("-1.58"), Decimal("1.26"), Decimal("0.00")]


def test_product_decimal_overflow_is_null() -> None:
    d = pl.Decimal(5, 1)
    assert agg("product", d, [Decimal("9999.9"), Decimal("999.9")], [Decimal("10.0"), Decimal("10.0")]) == [
        None, Decimal("9999.0")]


def test_product_decimal_wide() -> None:
    d = pl.Decimal(38, 10)
    half = Decimal("1.0000000005")
    assert agg("product", d, [half, Decimal(10**27)], [Decimal("1.0000000000"), Decimal(10**27)]) == [half, None]
    # 4e-10 * 0.1 = 4e-11 rounds to 0; 5e-10 * 0.1 = 5e-11 rounds up; 1.5e-9 * 0.5 = 7.5e-10 rounds up
    assert agg("product", d, [Decimal("0.0000000004"), Decimal("0.0000000005"), Decimal("0.0000000015")],
               [Decimal("0.1"), Decimal("0.1"), Decimal("0.5")]) == [Decimal(f"{u}E-10") for u in (0, 1, 8)]
    assert agg("product", d, [Decimal("-0.0000000015")], [Decimal("0.05")]) == [Decimal("-1E-10")]


# ---------------------------------------------------------------- max / min


def test_max_min_floats_use_java_total_order() -> None:
    nan = float("nan")
    out = agg("max", pl.Float64, [nan, 1.0, -0.0, 0.0, None], [2.0, nan, 0.0, -0.0, nan])
    assert math.isnan(out[0]) and math.isnan(out[1]) and math.isnan(out[4])
    assert bits(out[2]) == bits(0.0) and bits(out[3]) == bits(0.0)
    out = agg("min", pl.Float64, [nan, 1.0, -0.0, 0.0, float("-inf")], [2.0, nan, 0.0, -0.0, -1.0])
    assert out[:2] == [2.0, 1.0] and out[4] == float("-inf")
    assert bits(out[2]) == bits(-0.0) and bits(out[3]) == bits(-0.0)
    out = agg("max", pl.Float32, [nan, -0.0], [1.0, 0.0])
    assert math.isnan(out[0]) and struct.pack(">f", out[1]) == struct.pack(">f", 0.0)


def test_max_min_negative_nan_and_ties() -> None:
    neg_nan = struct.unpack(">d", bytes.fromhex("fff8000000000001"))[0]  # sign bit set: still the largest in Java
    assert math.isnan(agg("max", pl.Float64, [float("inf")], [neg_nan])[0])
    assert agg("min", pl.Float64, [neg_nan], [float("inf")]) == [float("inf")]
    # NaNs compare equal: max keeps the accumulator (acc < in ? in : acc), min takes the input (acc < in ? acc : in)
    other_nan = struct.unpack(">d", bytes.fromhex("7ff8000000000002"))[0]
    assert bits(agg("max", pl.Float64, [neg_nan], [other_nan])[0]) == bits(neg_nan)
    assert bits(agg("min", pl.Float64, [neg_nan], [other_nan])[0]) == bits(other_nan)


def test_max_min_strings_bytewise_utf8() -> None:
    # UTF-16 order would put U+1F600 (surrogates D83D..) below U+FFFF; UTF-8 bytes put it above.
    assert agg("max", pl.String, ["\uffff", "é", "a"], ["😀", "z", None]) == ["😀", "é", "a"]
    assert agg("min", pl.String, ["\uffff", "é", None], ["😀", "z", "b"]) == ["\uffff", "z", "b"]


def test_max_min_other_types() -> None:
    assert agg("max", pl.Int32, [1, 5, None], [3, 2, 7]) == [3, 5, 7]
    assert agg("min", pl.Int8, [1, 5], [3, -2]) == [1, -2]
    assert agg("max", pl.Decimal(10, 2), [Decimal("1.10")], [Decimal("1.09")]) == [Decimal("1.10")]
    assert agg("min", pl.Date, [date(2024, 1, 2)], [date(2024, 1, 1)]) == [date(2024, 1, 1)]
    assert agg("max", pl.Time, [time(1)], [time(2)]) == [time(2)]
    t1, t2 = datetime(2024, 1, 15, 15), datetime(2024, 2, 1, 18)
    assert agg("max", pl.Datetime("ms"), [t1, t2], [t2, t1]) == [t2, t2]
    assert agg("min", pl.Datetime("us", "UTC"), [None], [None]) == [None]


# ---------------------------------------------------------------- value functions


def test_last_and_first_value() -> None:
    assert agg("last_value", pl.Int32, [1, 1, None], [2, None, None]) == [2, None, None]
    assert agg("last_value_ignore_nulls", pl.String, ["a", "a", None], ["b", None, "c"]) == ["b", "a", "c"]
    for fn in ("first_value", "first_value_ignore_nulls"):
        assert agg(fn, pl.Boolean, [True, None, None], [False, False, None]) == [True, False, None]


def test_listagg_and_string_agg() -> None:
    assert agg("listagg", pl.String, ["a", None, "a", None], ["b", "b", None, None]) == ["a,b", "b", "a", None]
    assert agg("string_agg", pl.String, ["a"], ["b"], delimiter="|") == ["a|b"]
    assert agg("LISTAGG", pl.String, ["a,b"], ["a"], delimiter=" ; ") == ["a,b ; a"]  # no de-duplication


def test_bool_and_or_ignore_nulls() -> None:
    acc, inp = [True, True, None, False, None], [False, None, False, True, None]
    assert agg("bool_and", pl.Boolean, acc, inp) == [False, True, False, False, None]
    assert agg("bool_or", pl.Boolean, acc, inp) == [True, True, False, True, None]


@pytest.mark.parametrize(("function", "bitmap", "values"), [
    ("rbm32", BitMap, ([1, 2, 2**31], [2, 3, 2**32 - 1])),
    ("rbm64", BitMap64, ([1, 2**40], [2**63, 5])),
])
def test_roaring_bitmap_union(function: str, bitmap: Any, values: tuple[list[int], list[int]]) -> None:
    a, b = bitmap(values[0]).serialize(), bitmap(values[1]).serialize()
    out = agg(function, pl.Binary, [a, a, None, None], [b, None, b, None])
    assert bitmap.deserialize(out[0]) == bitmap(values[0] + values[1])
    assert out[1:] == [a, b, None]


def test_roaring_bitmap_rejects_garbage() -> None:
    with pytest.raises(SchemaMismatchError, match="RoaringBitmap"):
        agg("rbm32", pl.Binary, [BitMap([1]).serialize()], [b"not a bitmap"])


# ---------------------------------------------------------------- validation


NUMERIC = [pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.Float32, pl.Float64, pl.Decimal(10, 2)]
ORDERED = [*NUMERIC, pl.String, pl.Date, pl.Time, pl.Datetime("ms"), pl.Datetime("ns", "UTC")]
ALL = [*ORDERED, pl.Boolean, pl.Binary]
ACCEPTED: dict[str, list[pl.DataType]] = {
    "sum": NUMERIC, "product": NUMERIC, "max": ORDERED, "min": ORDERED,
    "last_value": ALL, "last_value_ignore_nulls": ALL, "first_value": ALL, "first_value_ignore_nulls": ALL,
    "listagg": [pl.String], "string_agg": [pl.String], "bool_and": [pl.Boolean], "bool_or": [pl.Boolean],
    "rbm32": [pl.Binary], "rbm64": [pl.Binary],
}


@pytest.mark.parametrize("function", AGG_FUNCTIONS)
def test_type_table(function: str) -> None:
    for dtype in ALL:
        if dtype in ACCEPTED[function]:
            validate_aggregation("c", dtype, AggSpec(function))
        else:
            with pytest.raises(InvalidConfigError, match="accepts"):
                validate_aggregation("c", dtype, AggSpec(function))


def test_function_names_and_params() -> None:
    assert normalize_function_name("Bool-And") == "bool_and"
    validate_aggregation("c", pl.Boolean, AggSpec("BOOL-AND"))
    with pytest.raises(InvalidConfigError, match="Unknown aggregate function"):
        validate_aggregation("c", pl.Int32, AggSpec("median"))
    with pytest.raises(InvalidConfigError, match="non-empty"):
        validate_aggregation("c", pl.String, AggSpec("listagg", {"delimiter": ""}))
    with pytest.raises(InvalidConfigError, match="takes only delimiter"):
        validate_aggregation("c", pl.String, AggSpec("string_agg", {"separator": ";"}))
    with pytest.raises(InvalidConfigError, match="no parameters"):
        validate_aggregation("c", pl.Int32, AggSpec("sum", {"delimiter": ","}))


# ---------------------------------------------------------------- the engine


def test_first_row_verbatim_then_always_update() -> None:
    spec = table(a="sum", b="max", s="last_value")
    got = run(spec, [
        (None, {"id": 1, "a": 10, "b": None, "s": "x"}, False),
        ({"id": 2, "a": 10, "b": 100, "s": "x"}, {"id": 2, "a": 5, "b": 50, "s": None}, False),
    ])
    assert got[0] == (EMIT_INSERT, True, {"id": 1, "a": 10, "b": None, "s": "x"})
    assert got[1] == (EMIT_UPDATE, True, {"id": 2, "a": 15, "b": 100, "s": None})


def test_default_function_is_last_value_ignore_nulls() -> None:
    spec = table(a="sum")
    got = run(spec, [({"id": 1, "a": 8, "b": 15, "s": "Bob"}, {"id": 1, "a": 0, "b": 0, "s": None}, False)])
    assert got[0] == (EMIT_UPDATE, True, {"id": 1, "a": 8, "b": 0, "s": "Bob"})


def test_partial_update_aggregates_targets_only() -> None:
    spec = table(a="sum", b="sum")
    got = run(spec, [
        ({"id": 1, "a": 10, "b": 100, "s": "k"}, {"id": 1, "a": 5, "b": 50, "s": "ignored"}, False),
        (None, {"id": 2, "a": 5, "b": 50, "s": "as sent"}, False),
    ], targets=["id", "a"])
    assert got[0] == (EMIT_UPDATE, True, {"id": 1, "a": 15, "b": 100, "s": "k"})
    assert got[1] == (EMIT_INSERT, True, {"id": 2, "a": 5, "b": 50, "s": "as sent"})
    got = run(spec, [({"id": 1, "a": 10, "b": 1, "s": None}, {"id": 1, "a": 1}, False)], targets=["id"])
    assert got[0] == (EMIT_UPDATE, True, {"id": 1, "a": 10, "b": 1, "s": None})


def test_deletes_by_behavior() -> None:
    stored = {"id": 1, "a": 10, "b": 1, "s": "x"}
    got = run(table(a="sum"), [(stored, {"id": 1}, True), (None, {"id": 2}, True)])
    assert got == [(EMIT_NOTHING, True, stored), (EMIT_NOTHING, False, {"id": None, "a": None, "b": None, "s": None})]
    allow = with_behavior(table(a="sum"), "allow")
    assert run(allow, [(stored, {"id": 1}, True)])[0][:2] == (EMIT_DELETE, False)
    with pytest.raises(DeletionDisabledError):
        run(with_behavior(table(a="sum"), "disable"), [(stored, {"id": 1}, True)])


def test_partial_delete_both_branches() -> None:
    allow = with_behavior(table(a="sum", b="max"), "allow")
    got = run(allow, [
        ({"id": 1, "a": 100, "b": 50, "s": "keep"}, {"id": 1}, True),
        ({"id": 2, "a": 100, "b": 50, "s": None}, {"id": 2}, True),
    ], targets=["id", "a", "b"])
    assert got[0] == (EMIT_UPDATE, True, {"id": 1, "a": None, "b": None, "s": "keep"})
    assert got[1][:2] == (EMIT_DELETE, False)


def test_output_dtypes_for_every_function() -> None:
    dtypes: dict[str, pl.DataType] = {"id": pl.Int32, "d": pl.Decimal(12, 3), "f": pl.Float32, "t": pl.Datetime("ns"),
                                      "bm": pl.Binary, "flag": pl.Boolean, "tag": pl.String}
    spec = MergeSpec(columns=tuple(dtypes), dtypes=dtypes, nullable={c: c != "id" for c in dtypes},
                     primary_key=("id",), merge_engine="aggregation", delete_behavior="ignore",
                     aggregations={"d": AggSpec("product"), "f": AggSpec("min"), "t": AggSpec("max"),
                                   "bm": AggSpec("rbm64"), "flag": AggSpec("bool_or"), "tag": AggSpec("listagg")})
    row = {"id": 1, "d": Decimal("1.500"), "f": 2.5, "t": datetime(2024, 1, 1), "bm": BitMap64([1]).serialize(),
           "flag": False, "tag": "x"}
    got = run(spec, [(row, dict(row, f=-1.0, flag=True), False)])
    assert got[0][2]["d"] == Decimal("2.250") and got[0][2]["f"] == -1.0 and got[0][2]["tag"] == "x,x"
    assert got[0][2]["flag"] is True
