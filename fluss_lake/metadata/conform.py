"""Turn user data into a frame that fits the table exactly, or raise before anything is written."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from fluss_lake.exceptions import NullPrimaryKeyError, SchemaMismatchError
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.types import arrow_type_name, fluss_type_name, to_polars_dtype

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
            # infer the values' own types; conform() then applies the frame cast rules
            dtypes = schema.polars_schema
            return pl.DataFrame(
                [_python_series(name, [row.get(name) for row in items], dtypes[name]) for name in names]
            )
    raise SchemaMismatchError(
        f"cannot write {type(data).__name__}; pass a Polars DataFrame, Arrow data or a list of dicts"
    )


def _has_map(dtype: pl.DataType) -> bool:
    """Whether a dtype is or holds a MAP (whose Python values are dicts too, but not ROW values)."""
    if isinstance(dtype, pl.Map):
        return True
    if isinstance(dtype, pl.List | pl.Array):
        return _has_map(to_polars_dtype(dtype.inner))
    if isinstance(dtype, pl.Struct):
        return any(_has_map(to_polars_dtype(f.dtype)) for f in dtype.fields)
    return False


def _python_series(name: str, values: list[Any], target: pl.DataType | None = None, path: str = "") -> pl.Series:
    """A column of Python values; dicts (ROW values) field by field, so a field only some rows give is kept (Polars
    infers a struct from its first value and would drop the others' extra fields). A column holding MAPs (dicts
    ``{key: value}``) is built with its declared type directly: a dict there is a map, not a ROW. `path` names a
    ROW field in messages (``addr.zip``)."""
    path = path or name
    if target is not None and _has_map(target):
        try:
            return pl.Series(name, values, dtype=target, strict=True)
        except Exception as exc:
            raise SchemaMismatchError(
                f"column {path!r}: values do not fit {fluss_type_name(target)} ({_first_line(exc)}); give MAP "
                "values as dicts with non-null keys of the key type and values of the value type"
            ) from exc
    if any(isinstance(v, Mapping) for v in values):
        if not all(v is None or isinstance(v, Mapping) for v in values):
            raise SchemaMismatchError(f"column {path!r}: rows mix ROW values (dicts) with other values; send one type")
        keys = list(dict.fromkeys(k for v in values if v is not None for k in v))
        inner = {f.name: to_polars_dtype(f.dtype) for f in target.fields} if isinstance(target, pl.Struct) else {}
        fields = [
            _python_series(str(k), [None if v is None else v.get(k) for v in values], inner.get(str(k)), f"{path}.{k}")
            for k in keys
        ]
        if not fields:
            return pl.Series(name, [None] * len(values), dtype=pl.Null)
        struct = pl.DataFrame(fields).select(pl.struct(pl.all()).alias(name)).to_series()
        missing = pl.Series([v is None for v in values])
        if missing.any():  # a null ROW stays null (not a ROW of nulls)
            struct = pl.select(pl.when(missing).then(None).otherwise(struct).alias(name)).to_series()
        return struct
    try:
        series = pl.Series(name, values, strict=True)
    except Exception as exc:
        raise SchemaMismatchError(
            f"column {path!r}: values do not form one type ({_first_line(exc)}); send one type per column"
        ) from exc
    lost = _lost_fields(values, series.dtype)
    if lost:
        raise SchemaMismatchError(
            f"column {path!r}: the ROW values inside its arrays do not all give the same fields ({sorted(lost)} "
            "only in some); give every one the same fields, or pass a Polars DataFrame or Arrow data"
        )
    return series


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n", 1)[0]


def _lost_fields(values: Iterable[Any], dtype: pl.DataType) -> set[str]:
    """Dict keys among `values` that `dtype` (what Polars inferred) has no field for."""
    lost: set[str] = set()
    values = list(values)
    if isinstance(dtype, pl.Struct):
        fields = {f.name: to_polars_dtype(f.dtype) for f in dtype.fields}
        for value in values:
            if isinstance(value, Mapping):
                lost.update(str(k) for k in value if k not in fields)
        for field_name, field_dtype in fields.items():
            lost |= _lost_fields((v.get(field_name) for v in values if isinstance(v, Mapping)), field_dtype)
    elif isinstance(dtype, pl.List | pl.Array):
        lost |= _lost_fields(
            (e for v in values if isinstance(v, list | tuple) for e in v), to_polars_dtype(dtype.inner)
        )
    return lost


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
    if isinstance(target, pl.Struct) and isinstance(series.dtype, pl.Struct):
        return _cast_struct(series, target)
    if isinstance(target, pl.Map) and isinstance(series.dtype, pl.Map | pl.List):
        return _cast_map(series, target)
    if isinstance(target, pl.Array) and isinstance(series.dtype, pl.List | pl.Array):
        return _cast_vector(series, target)
    if isinstance(target, pl.List) and isinstance(series.dtype, pl.Array):
        series = series.cast(pl.List(to_polars_dtype(series.dtype.inner)))
    if isinstance(target, pl.List) and isinstance(series.dtype, pl.List):
        inner = _cast(series.explode().alias(f"{series.name}[]"), to_polars_dtype(target.inner))  # top-level rules
        try:
            return series.cast(pl.List(inner.dtype)).cast(target, strict=True)
        except Exception as exc:
            raise SchemaMismatchError(
                f"column {series.name!r}: values do not fit {fluss_type_name(target)} ({exc.__class__.__name__})"
            ) from exc
    raise SchemaMismatchError(
        f"column {series.name!r} is {fluss_type_name(target)} but the data is {series.dtype}; cast the data first"
    )


def _entries(key: pl.DataType, value: pl.DataType) -> pl.DataType:
    """A MAP's entries as Polars lists them (``List(Struct{key, value})``)."""
    return pl.List(pl.Struct({"key": key, "value": value}))


def _cast_map(series: pl.Series, target: pl.Map) -> pl.Series:
    """A MAP (or Arrow-style list of ``{key, value}`` entries) with the top-level cast rules on keys and values;
    a null key is refused (Fluss and Arrow maps have none)."""
    key, value = to_polars_dtype(target.key), to_polars_dtype(target.value)
    if isinstance(series.dtype, pl.Map):
        series = series.cast(_entries(to_polars_dtype(series.dtype.key), to_polars_dtype(series.dtype.value)))
    inner = to_polars_dtype(series.dtype.inner) if isinstance(series.dtype, pl.List) else None
    if not isinstance(inner, pl.Struct) or [f.name for f in inner.fields] != ["key", "value"]:
        raise SchemaMismatchError(
            f"column {series.name!r} is {fluss_type_name(target)} but the data is {series.dtype}; give dicts, "
            "a Polars Map or lists of {key, value} entries"
        )
    entries = _cast(series, _entries(key, value))
    keys = entries.explode().struct.field("key")
    if keys.null_count() > entries.explode().is_null().sum():
        raise SchemaMismatchError(
            f"column {series.name!r} ({fluss_type_name(target)}) has a null map key; map keys must be set"
        )
    return entries.cast(target)


def _cast_vector(series: pl.Series, target: pl.Array) -> pl.Series:
    """A fixed-length ARRAY (vector): every non-null value must have exactly the declared length."""
    width = target.size
    lengths = series.arr.len() if isinstance(series.dtype, pl.Array) else series.list.len()
    wrong = lengths.filter(lengths.is_not_null() & (lengths != width))
    if wrong.len():
        raise SchemaMismatchError(
            f"column {series.name!r} is a vector of {width} values ({fluss_type_name(target)}) "
            f"but {wrong.len()} row(s) have "
            f"length(s) {sorted(set(wrong.to_list()))[:5]}; "
            f"give exactly {width} values per row (nothing was written)"
        )
    if isinstance(series.dtype, pl.Array):
        series = series.cast(pl.List(to_polars_dtype(series.dtype.inner)))
    inner = _cast(series, pl.List(to_polars_dtype(target.inner)))
    return inner.cast(target)


def _nested_null_path(values: pa.Array, kind: pa.DataType, path: str) -> str | None:
    """The path of the first NOT NULL element, map value or ROW field of `kind` that `values` hold a null in."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        values = values.filter(values.is_valid())
    if isinstance(kind, pa.MapType):
        checks = [(values.items, kind.item_field, f"{path}[value]")]
    elif isinstance(kind, pa.ListType | pa.LargeListType | pa.FixedSizeListType):
        checks = [(values.flatten(), kind.value_field, f"{path}[]")]
    elif isinstance(kind, pa.StructType):
        checks = [(values.field(i), kind.field(i), f"{path}.{kind.field(i).name}") for i in range(kind.num_fields)]
    else:
        return None
    for child, field, child_path in checks:
        if not field.nullable and child.null_count:
            return child_path
        found = _nested_null_path(child, field.type, child_path)
        if found is not None:
            return found
    return None


def _check_nested_not_null(series: pl.Series, kind: pa.DataType) -> None:
    """Refuse nulls where a nested type declares NOT NULL (``ARRAY<INT NOT NULL>``, ``ROW<a INT NOT NULL>``)."""
    path = _nested_null_path(series.to_arrow(), kind, series.name)
    if path is not None:
        raise SchemaMismatchError(
            f"column {series.name!r} ({arrow_type_name(kind)}): {path!r} is NOT NULL but has null value(s); "
            "fill them (nothing was written)"
        )


def _cast_struct(series: pl.Series, target: pl.Struct) -> pl.Series:
    """A ROW value field by field, with the same rules as a top-level column (fields it lacks are null)."""
    wanted = {f.name: f.dtype for f in target.fields}
    given = list(series.struct.fields)
    extra = [name for name in given if name not in wanted]
    if extra:
        raise SchemaMismatchError(
            f"column {series.name!r} is {fluss_type_name(target)} but the data has field(s) {extra} it lacks; "
            "drop them or add them to the ROW type"
        )
    fields = [
        _cast(series.struct.field(name).alias(f"{series.name}.{name}"), to_polars_dtype(dtype)).alias(name)
        if name in given
        else pl.Series(name, [None] * series.len(), dtype=dtype)
        for name, dtype in wanted.items()
    ]
    rebuilt = pl.DataFrame(fields).select(pl.struct(pl.all()).alias(series.name)).to_series()
    if series.null_count():  # a null ROW stays null (not a ROW of nulls)
        rebuilt = pl.select(pl.when(series.is_null()).then(None).otherwise(rebuilt).alias(series.name)).to_series()
    return rebuilt.cast(target)


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
            if column.arrow is not None:
                _check_nested_not_null(cast, column.arrow)
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
