"""Turn user data into a frame that fits the table exactly, or raise before anything is written."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from fluss_lake.exceptions import NullPrimaryKeyError, SchemaMismatchError
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.types import fluss_type_name

__all__ = ["WriteData", "to_frame", "conform"]

WriteData = pl.DataFrame | pa.Table | pa.RecordBatch | Sequence[pa.RecordBatch] | Sequence[Mapping[str, Any]]


def to_frame(data: Any, schema: Schema) -> pl.DataFrame:
    """A Polars frame from a DataFrame, Arrow table/batch(es) or a list of dicts."""
    if isinstance(data, pl.DataFrame):
        return data
    if isinstance(data, pl.LazyFrame):
        return data.collect()
    if isinstance(data, pa.Table | pa.RecordBatch):
        _check_arrow_temporal_range(data)
        return pl.DataFrame(pl.from_arrow(data))
    if isinstance(data, Mapping):
        raise SchemaMismatchError("pass rows as a list of dicts, a Polars DataFrame or Arrow data, not a single dict")
    if isinstance(data, Iterable):
        items = list(data)
        if not items:
            return pl.DataFrame(schema=schema.polars_schema)
        if all(isinstance(i, pa.RecordBatch) for i in items):
            table = pa.Table.from_batches(items)
            _check_arrow_temporal_range(table)
            return pl.DataFrame(pl.from_arrow(table))
        if all(isinstance(i, Mapping) for i in items):
            names = list(dict.fromkeys(k for row in items for k in row))
            unknown = [n for n in names if n not in schema.names]
            if unknown:
                raise SchemaMismatchError(f"unknown column(s) {unknown}; the table has {list(schema.names)}")
            for name in names:  # Python objects are per row anyway: refuse columns that mix value types
                kinds = {_kind_of(row[name]) for row in items if row.get(name) is not None}
                if len(kinds) > 1 and not kinds <= {"int", "float"}:
                    raise SchemaMismatchError(
                        f"column {name!r} is {schema.column(name).type_name} but the rows mix "
                        f"values of types {sorted(kinds)}; send one type per column"
                    )
            columns = []
            for name in names:  # infer the values' own types; conform() then applies the frame cast rules
                try:
                    columns.append(pl.Series(name, [row.get(name) for row in items], strict=True))
                except Exception as exc:
                    raise SchemaMismatchError(
                        f"column {name!r}: values do not form one type ({exc}); send one type per column"
                    ) from exc
            return pl.DataFrame(columns)
    raise SchemaMismatchError(
        f"cannot write {type(data).__name__}; pass a Polars DataFrame, Arrow data or a list of dicts"
    )


#: Fluss's (and Python's) range of DATE and TIMESTAMP values, years 1 to 9999, in microseconds since the epoch.
_MIN_US, _MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999
_PER_US = {"s": (1, 1_000_000), "ms": (1, 1_000), "us": (1, 1), "ns": (1_000, 1)}  # (multiply, divide)


def _out_of_range(name: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {name!r} has date/time values outside the years 1 to 9999 (DATE and "
        "TIMESTAMP range); fix or drop those rows (nothing was written)"
    )


def _check_arrow_temporal_range(data: pa.Table | pa.RecordBatch) -> None:
    """Refuse Arrow dates and timestamps outside years 1 to 9999 before Polars converts them (it would wrap
    a timestamp[s] that overflows milliseconds into another instant)."""
    for field, column in zip(data.schema, data.columns, strict=True):
        kind = field.type
        if pa.types.is_timestamp(kind):
            mul, div = _PER_US[kind.unit]
            lo, hi = _MIN_US * mul // div, _MAX_US * mul // div
        elif pa.types.is_date32(kind):
            lo, hi = _MIN_US // 86_400_000_000, _MAX_US // 86_400_000_000
        elif pa.types.is_date64(kind):
            lo, hi = _MIN_US // 1_000, _MAX_US // 1_000
        else:
            continue
        storage = pa.int32() if pa.types.is_date32(kind) else pa.int64()  # the values as stored
        bounds = pc.min_max(column.cast(storage))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and (low < lo or high > hi):
            raise _out_of_range(field.name)


def _check_temporal_range(series: pl.Series) -> None:
    """Refuse dates and timestamps outside years 1 to 9999 (they cannot be read back as Python values)."""
    if not isinstance(series.dtype, pl.Date | pl.Datetime) or not series.len() or series.null_count() == series.len():
        return
    years = series.dt.year()
    if years.null_count() > series.null_count() or not (years.min() >= 1 and years.max() <= 9999):  # type: ignore[operator]
        raise _out_of_range(series.name)


def _kind_of(value: Any) -> str:
    """A Python value's type name; datetimes tell naive from time-zone aware."""
    import datetime as dt

    if isinstance(value, dt.datetime):
        return "datetime (aware)" if value.tzinfo is not None else "datetime (naive)"
    return type(value).__name__


_KINDS = (
    ("int", (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)),
    ("float", (pl.Float32, pl.Float64)),
    ("decimal", (pl.Decimal,)),
    ("string", (pl.String, pl.Categorical, pl.Enum)),
    ("binary", (pl.Binary,)),
    ("bool", (pl.Boolean,)),
    ("date", (pl.Date,)),
    ("time", (pl.Time,)),
    ("datetime", (pl.Datetime,)),
)
_ALLOWED = {("int", "float"), ("int", "decimal"), ("float", "decimal"), ("date", "datetime"), ("null", "*")}


def _kind(dtype: pl.DataType) -> str:
    """Coarse kind of a dtype for deciding which casts are safe."""
    if dtype == pl.Null:
        return "null"
    for name, classes in _KINDS:
        if isinstance(dtype, classes):
            return name
    return str(dtype)


def _cast(series: pl.Series, target: pl.DataType) -> pl.Series:
    """Cast without losing information, or raise SchemaMismatchError naming the column."""
    if series.dtype == target:
        return series
    src, dst = _kind(series.dtype), _kind(target)
    if (
        src == dst
        and isinstance(target, pl.Datetime)
        and isinstance(series.dtype, pl.Datetime)
        and bool(target.time_zone) != bool(series.dtype.time_zone)
    ):
        raise SchemaMismatchError(
            f"column {series.name!r} is {fluss_type_name(target)} but the data is "
            f"{series.dtype}; convert time zones explicitly (TIMESTAMP_LTZ takes UTC instants)"
        )
    if src == dst or (src, dst) in _ALLOWED or src == "null" or (src == dst == str(target)):
        try:
            cast = series.cast(target, strict=True)
            if dst == "float" and src in ("float", "int"):  # float casts never fail: refuse new infinities
                grew = cast.is_infinite() & ~series.cast(pl.Float64).is_infinite()
                if bool(grew.any()):
                    raise SchemaMismatchError(
                        f"column {series.name!r}: values are too large for "
                        f"{fluss_type_name(target)}; use DOUBLE or smaller values"
                    )
            return cast
        except Exception as exc:
            raise SchemaMismatchError(
                f"column {series.name!r}: values do not fit {fluss_type_name(target)} "
                f"({exc.__class__.__name__}); fix the values or the column type"
            ) from exc
    raise SchemaMismatchError(
        f"column {series.name!r} is {fluss_type_name(target)} but the data is {series.dtype}; cast the data first"
    )


def conform(
    frame: pl.DataFrame,
    schema: Schema,
    *,
    required: Sequence[str],
    not_null_checked: Sequence[str] = (),
    key_columns: Sequence[str] = (),
) -> pl.DataFrame:
    """Every table column in order with the table's dtypes; `required` columns must be present.

    Missing non-required columns are filled with nulls (partial updates, deletes). Nulls in `key_columns`
    raise NullPrimaryKeyError; nulls in `not_null_checked` columns raise SchemaMismatchError.
    """
    unknown = [c for c in frame.columns if c not in schema.names]
    if unknown:
        raise SchemaMismatchError(
            f"unknown column(s) {unknown}; the table has {list(schema.names)} (add a column with alter_table first)"
        )
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise SchemaMismatchError(
            f"missing column(s) {missing}; write every column, or pass target_columns for a partial update"
        )
    columns = []
    for column in schema.columns:
        if column.name in frame.columns:
            cast = _cast(frame.get_column(column.name), column.dtype)
            _check_temporal_range(cast)
            columns.append(cast)
        else:
            columns.append(pl.Series(column.name, [None] * frame.height, dtype=column.dtype))
    result = pl.DataFrame(columns)
    for name in key_columns:
        nulls = result.get_column(name).null_count()
        if nulls:
            raise NullPrimaryKeyError(
                f"key column {name!r} has {nulls} null value(s); keys must be set, fill or drop those rows"
            )
    for name in not_null_checked:
        if name in key_columns:
            continue
        nulls = result.get_column(name).null_count()
        if nulls:
            raise SchemaMismatchError(f"column {name!r} is NOT NULL but has {nulls} null value(s); fill them")
    return result
