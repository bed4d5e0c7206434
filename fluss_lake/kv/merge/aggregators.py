"""Aggregate functions of the ``aggregation`` merge engine, vectorized over a round (Fluss ``aggregate/functions``).

An aggregate function takes the stored accumulators and the written values (two aligned Series of the column's
dtype) and returns ``acc' = f(acc, in)`` with the same dtype. ``f(null, null)`` is always null, so callers may
mask rows they do not aggregate by nulling both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from pyroaring import BitMap, BitMap64

from fluss_lake.exceptions import InvalidConfigError, SchemaMismatchError
from fluss_lake.kv.merge.merge_spec import DEFAULT_AGG_FUNCTION, AggSpec
from fluss_lake.metadata.types import fluss_type_name

__all__ = [
    "AGG_FUNCTIONS",
    "DEFAULT_AGG_FUNCTION",
    "DEFAULT_LISTAGG_DELIMITER",
    "AggregateFunction",
    "create_aggregator",
    "normalize_function_name",
    "validate_aggregation",
]

AggregateFunction = Callable[[pl.Series, pl.Series], pl.Series]

#: Every aggregate function name, as Fluss spells it (``fields.<col>.agg``).
AGG_FUNCTIONS: tuple[str, ...] = (
    "sum",
    "product",
    "max",
    "min",
    "last_value",
    "last_value_ignore_nulls",
    "first_value",
    "first_value_ignore_nulls",
    "listagg",
    "string_agg",
    "bool_and",
    "bool_or",
    "rbm32",
    "rbm64",
)
#: ``fields.<col>.listagg.delimiter`` when unset.
DEFAULT_LISTAGG_DELIMITER = ","

_A, _B = pl.col("a"), pl.col("b")
_INTEGERS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64)
_NUMERIC_TYPES = "TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL"
_ORDERED_TYPES = f"CHAR, STRING, {_NUMERIC_TYPES}, DATE, TIME, TIMESTAMP, TIMESTAMP_LTZ"
_FLUSS_NAMES: dict[type[pl.DataType], str] = {
    pl.Int8: "TINYINT",
    pl.Int16: "SMALLINT",
    pl.Int32: "INT",
    pl.Int64: "BIGINT",
    pl.Float32: "FLOAT",
    pl.Float64: "DOUBLE",
    pl.String: "STRING",
    pl.Binary: "BYTES",
    pl.Boolean: "BOOLEAN",
    pl.Date: "DATE",
    pl.Time: "TIME",
}


def normalize_function_name(name: str) -> str:
    """Return the canonical spelling of an aggregate function name: case-insensitive, ``-`` read as ``_``.

    Examples
    --------
    >>> normalize_function_name("Last-Value-Ignore-Nulls")
    'last_value_ignore_nulls'
    """
    return name.strip().lower().replace("-", "_")


def _fluss_type(dtype: pl.DataType) -> str:
    """Return the Fluss name of a Polars dtype, for error messages."""
    if isinstance(dtype, pl.Decimal):
        return f"DECIMAL({dtype.precision}, {dtype.scale})"
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMP_LTZ" if dtype.time_zone else "TIMESTAMP"
    if isinstance(dtype, pl.List | pl.Array | pl.Map | pl.Struct):
        return fluss_type_name(dtype)  # ARRAY<...>, MAP<...>, ROW<...>
    return _FLUSS_NAMES.get(dtype.base_type(), str(dtype))


def _is_numeric(dtype: pl.DataType) -> bool:
    """Whether ``dtype`` is one of Fluss's numeric types."""
    return dtype in (*_INTEGERS, pl.Float32, pl.Float64) or isinstance(dtype, pl.Decimal)


def _is_ordered(dtype: pl.DataType) -> bool:
    """Whether ``max``/``min`` accept ``dtype``."""
    return _is_numeric(dtype) or dtype in (pl.String, pl.Date, pl.Time) or isinstance(dtype, pl.Datetime)


_ANY = (lambda dtype: True, "every type")
_ACCEPTS: dict[str, tuple[Callable[[pl.DataType], bool], str]] = {
    "sum": (_is_numeric, _NUMERIC_TYPES),
    "product": (_is_numeric, _NUMERIC_TYPES),
    "max": (_is_ordered, _ORDERED_TYPES),
    "min": (_is_ordered, _ORDERED_TYPES),
    "last_value": _ANY,
    "last_value_ignore_nulls": _ANY,
    "first_value": _ANY,
    "first_value_ignore_nulls": _ANY,
    "listagg": (lambda dtype: dtype == pl.String, "STRING"),
    "string_agg": (lambda dtype: dtype == pl.String, "STRING"),
    "bool_and": (lambda dtype: dtype == pl.Boolean, "BOOLEAN"),
    "bool_or": (lambda dtype: dtype == pl.Boolean, "BOOLEAN"),
    "rbm32": (lambda dtype: dtype == pl.Binary, "BYTES"),
    "rbm64": (lambda dtype: dtype == pl.Binary, "BYTES"),
}
_PARAMS: dict[str, frozenset[str]] = {"listagg": frozenset({"delimiter"}), "string_agg": frozenset({"delimiter"})}


def validate_aggregation(column: str, dtype: pl.DataType, spec: AggSpec) -> None:
    """Check that ``spec`` names a known function that accepts ``dtype`` and has valid parameters.

    Raises :class:`~fluss_lake.exceptions.InvalidConfigError` for an unknown function, a type the function does
    not accept (the message lists the accepted types), a parameter the function does not take, or an empty
    ``delimiter``.

    Examples
    --------
    >>> import polars as pl
    >>> from fluss_lake.kv.merge import AggSpec
    >>> validate_aggregation("total", pl.Int64, AggSpec("SUM"))
    >>> try:
    ...     validate_aggregation("n", pl.Int32, AggSpec("bool_and"))
    ... except ValueError as err:
    ...     print(str(err).split(";")[1].split(".")[0])
     it accepts BOOLEAN
    """
    name = normalize_function_name(spec.function)
    if name not in _ACCEPTS:
        raise InvalidConfigError(
            f"Unknown aggregate function {spec.function!r} for column {column!r} (fields.{column}.agg); "
            f"choose one of {', '.join(AGG_FUNCTIONS)}."
        )
    accepts, accepted = _ACCEPTS[name]
    if not accepts(dtype):
        raise InvalidConfigError(
            f"Aggregate function {name!r} of column {column!r} does not accept type {_fluss_type(dtype)}; "
            f"it accepts {accepted}. Choose another function (fields.{column}.agg) or change the column type."
        )
    allowed = _PARAMS.get(name, frozenset())
    for key, value in spec.params.items():
        if key not in allowed:
            takes = f"only {', '.join(sorted(allowed))}" if allowed else "no parameters"
            raise InvalidConfigError(
                f"Unknown parameter fields.{column}.{name}.{key}: aggregate function {name!r} takes {takes}; "
                "remove the option."
            )
        if key == "delimiter" and (not isinstance(value, str) or value == ""):
            raise InvalidConfigError(
                f"fields.{column}.{name}.delimiter must be a non-empty string, got {value!r}; "
                f"set a delimiter or remove the option to use {DEFAULT_LISTAGG_DELIMITER!r}."
            )


def create_aggregator(column: str, dtype: pl.DataType, spec: AggSpec) -> AggregateFunction:
    """Validate ``spec`` and return the vectorized function ``(acc, in) -> acc'`` for a column of ``dtype``.

    Examples
    --------
    >>> import polars as pl
    >>> from fluss_lake.kv.merge import AggSpec
    >>> f = create_aggregator("n", pl.Int32, AggSpec("sum"))
    >>> f(pl.Series([2**31 - 1, None, 5], dtype=pl.Int32), pl.Series([1, 7, None], dtype=pl.Int32)).to_list()
    [-2147483648, 7, 5]
    """
    validate_aggregation(column, dtype, spec)
    name = normalize_function_name(spec.function)
    if name in ("sum", "product"):
        if isinstance(dtype, pl.Decimal):
            decimal_op = _decimal_sum if name == "sum" else _decimal_product
            return lambda acc, inp: decimal_op(acc, inp, dtype)
        combined = _A + _B if name == "sum" else _A * _B  # Polars integer arithmetic wraps like Java's
        return lambda acc, inp: _ignore_nulls(acc, inp, combined)
    if name in ("max", "min"):
        return _max if name == "max" else _min
    if name == "last_value":
        return lambda acc, inp: inp
    if name == "last_value_ignore_nulls":
        return lambda acc, inp: _pair(acc, inp).select(pl.coalesce(_B, _A)).to_series()
    if name in ("first_value", "first_value_ignore_nulls"):  # [doc!=code]: same code path in Fluss
        return lambda acc, inp: _pair(acc, inp).select(pl.coalesce(_A, _B)).to_series()
    if name in ("listagg", "string_agg"):
        delimiter = spec.params.get("delimiter", DEFAULT_LISTAGG_DELIMITER)
        return lambda acc, inp: _ignore_nulls(acc, inp, pl.concat_str([_A, pl.lit(delimiter), _B]))
    if name in ("bool_and", "bool_or"):
        logic = _A & _B if name == "bool_and" else _A | _B
        return lambda acc, inp: _ignore_nulls(acc, inp, logic)
    bitmap: type[BitMap] | type[BitMap64] = BitMap if name == "rbm32" else BitMap64
    return lambda acc, inp: _rbm_union(acc, inp, bitmap, column)


def _pair(acc: pl.Series, inp: pl.Series) -> pl.DataFrame:
    """Put accumulator and input side by side as columns ``a`` and ``b``."""
    return pl.DataFrame({"a": acc, "b": inp})


def _ignore_nulls(acc: pl.Series, inp: pl.Series, combined: pl.Expr) -> pl.Series:
    """Return ``combined`` where both sides are set, else the non-null side."""
    frame = _pair(acc, inp)
    return frame.select(pl.when(_A.is_null()).then(_B).when(_B.is_null()).then(_A).otherwise(combined)).to_series()


def _total_order_key(values: pl.Series) -> pl.Series:
    """Map floats to integers ordered like Java's ``Float.compare``/``Double.compare``: NaN largest, -0.0 < 0.0."""
    if values.dtype == pl.Float32:
        floats = np.ascontiguousarray(values.fill_null(0.0).to_numpy(), dtype=np.float32)
        bits = floats.view(np.int32)
        key = np.where(bits < 0, bits ^ np.int32(0x7FFFFFFF), bits)
        key = np.where(np.isnan(floats), np.int32(0x7FC00000), key)
    else:
        floats = np.ascontiguousarray(values.fill_null(0.0).to_numpy(), dtype=np.float64)
        bits = floats.view(np.int64)
        key = np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)
        key = np.where(np.isnan(floats), np.int64(0x7FF8000000000000), key)
    return pl.Series(key)


def _pick(acc: pl.Series, inp: pl.Series, *, take_input_if_greater: bool) -> pl.Series:
    """Shared body of max (keep acc on ties) and min (take the input on ties), nulls ignored."""
    frame = _pair(acc, inp)
    if acc.dtype in (pl.Float32, pl.Float64):
        frame = frame.with_columns(ka=_total_order_key(acc), kb=_total_order_key(inp))
        ka, kb = pl.col("ka"), pl.col("kb")
    else:  # Polars compares strings by their UTF-8 bytes, as Fluss's BinaryString does
        ka, kb = _A, _B
    # Fluss max: acc < in ? in : acc.  Fluss min: acc < in ? acc : in.
    chosen = pl.when(ka < kb).then(_B if take_input_if_greater else _A).otherwise(_A if take_input_if_greater else _B)
    return frame.select(pl.when(_A.is_null()).then(_B).when(_B.is_null()).then(_A).otherwise(chosen)).to_series()


def _max(acc: pl.Series, inp: pl.Series) -> pl.Series:
    """Return the larger value per row, ignoring nulls."""
    return _pick(acc, inp, take_input_if_greater=True)


def _min(acc: pl.Series, inp: pl.Series) -> pl.Series:
    """Return the smaller value per row, ignoring nulls."""
    return _pick(acc, inp, take_input_if_greater=False)


def _precision(dtype: pl.Decimal) -> int:
    """Return a decimal's precision (38 when unspecified)."""
    return dtype.precision if dtype.precision is not None else 38


def _int128(value: int) -> pl.Expr:
    """Return an Int128 literal."""
    return pl.lit(value, dtype=pl.Int128)


def _from_unscaled(unscaled: pl.Series, dtype: pl.Decimal) -> pl.Series:
    """Reinterpret unscaled Int128 values (|v| < 10**38) as a Decimal column of ``dtype``."""
    arr = unscaled.cast(pl.Decimal(38, 0)).to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    target = pa.decimal128(_precision(dtype), dtype.scale)
    return pl.Series(unscaled.name, pa.Array.from_buffers(target, len(arr), arr.buffers(), offset=arr.offset))


def _decimal_sum(acc: pl.Series, inp: pl.Series, dtype: pl.Decimal) -> pl.Series:
    """Sum decimals exactly on their unscaled values; null when the sum does not fit the column's precision.

    Deviation: for p <= 18 Fluss adds the unscaled longs and stores the result without re-checking the precision
    (only a long overflow gives null). A Decimal(p, s) column holding more than p digits reads back wrongly in
    Polars/Arrow (``to_list`` rounds it to p digits), so such a sum is null here, as every other decimal overflow.
    """
    precision = _precision(dtype)
    frame = _pair(acc.to_physical(), inp.to_physical())
    total = _A + _B  # Int128: |a|, |b| < 10**38, so only a sum past 2**127 wraps, caught below
    wrapped = ((_A > 0) & (_B > 0) & (total < 0)) | ((_A < 0) & (_B < 0) & (total >= 0))
    fits = ~wrapped & (total > _int128(-(10**precision))) & (total < _int128(10**precision))
    unscaled = frame.select(
        pl.when(_A.is_null()).then(_B).when(_B.is_null()).then(_A).when(fits).then(total).otherwise(None)
    ).to_series()
    return _from_unscaled(unscaled, dtype)


def _round_half_up(product: pl.Expr, scale: int) -> pl.Expr:
    """Divide an unscaled product of two scale-``scale`` decimals by 10**scale, rounding half away from zero."""
    if scale == 0:
        return product
    zero, divisor, half = _int128(0), _int128(10**scale), _int128(10**scale // 2)
    # Polars has no Int128 negation: subtract from zero instead.
    return pl.when(product < 0).then(zero - ((zero - product + half) // divisor)).otherwise((product + half) // divisor)


def _decimal_product(acc: pl.Series, inp: pl.Series, dtype: pl.Decimal) -> pl.Series:
    """Multiply decimals like Fluss: BigDecimal product, rounded HALF_UP to the scale, null past the precision."""
    precision, scale = _precision(dtype), dtype.scale
    frame = _pair(acc.to_physical(), inp.to_physical())
    passthrough = pl.when(_A.is_null()).then(_B).when(_B.is_null()).then(_A)
    if precision <= 18:  # |a|, |b| < 2**63, so the Int128 product is exact
        rounded = _round_half_up(_A * _B, scale)
        fits = (rounded > _int128(-(10**precision))) & (rounded < _int128(10**precision))
        unscaled = frame.select(passthrough.when(fits).then(rounded).otherwise(None)).to_series()
        return _from_unscaled(unscaled, dtype)
    # Wide decimals: the exact product can need 253 bits, more than Int128. Python integers in numpy object
    # arrays do it (numpy loops in C over the rows where both sides are set).
    unscaled = frame.select(passthrough.otherwise(None)).to_series()
    both = np.flatnonzero((acc.is_not_null() & inp.is_not_null()).to_numpy())
    if both.size:
        a = np.array(frame.get_column("a").gather(both).to_list(), dtype=object)
        b = np.array(frame.get_column("b").gather(both).to_list(), dtype=object)
        exact = a * b
        negative = exact < 0
        magnitude = np.where(negative, -exact, exact)
        rounded = (magnitude + 10**scale // 2) // 10**scale
        signed = np.where(negative, -rounded, rounded)
        values: Any = np.where(rounded < 10**precision, signed, None)
        unscaled = unscaled.scatter(both, pl.Series(values.tolist(), dtype=pl.Int128, strict=False))
    return _from_unscaled(unscaled, dtype)


def _load_bitmap(bitmap: type[BitMap] | type[BitMap64], data: bytes, column: str) -> Any:
    """Deserialize one portable-format bitmap, naming the column if the bytes are not one."""
    try:
        return bitmap.deserialize(data)
    except Exception as err:  # pyroaring raises ValueError/OverflowError on malformed input
        kind = "32-bit RoaringBitmap" if bitmap is BitMap else "64-bit Roaring64Bitmap"
        raise SchemaMismatchError(
            f"Column {column!r} holds bytes that are not a serialized {kind} (portable format): {err}; "
            "write bitmaps serialized with RoaringBitmap's portable serialization."
        ) from err


def _rbm_union(acc: pl.Series, inp: pl.Series, bitmap: type[BitMap] | type[BitMap64], column: str) -> pl.Series:
    """Union serialized bitmaps row by row, ignoring nulls."""
    result = _pair(acc, inp).select(pl.coalesce(_A, _B)).to_series()
    both = np.flatnonzero((acc.is_not_null() & inp.is_not_null()).to_numpy())
    if both.size:
        # Per-row Python loop, on purpose: a bitmap union must deserialize both sides, which has no columnar
        # form. Only rows whose accumulator AND input are both non-null get here; the rest is vectorized above.
        merged = [
            (_load_bitmap(bitmap, a, column) | _load_bitmap(bitmap, b, column)).serialize()
            for a, b in zip(acc.gather(both).to_list(), inp.gather(both).to_list(), strict=True)
        ]
        result = result.scatter(both, pl.Series(merged, dtype=pl.Binary))
    return result
