"""Lake schemas: the live schema mapped to Iceberg types (FLUSS-SEMANTICS §7.3) plus the system columns.

A lake table holds the live columns (ARRAY -> list, MAP -> map, ROW -> struct; pyiceberg gives every element,
key, value and field its own id), then ``__bucket`` (int), ``__offset`` (long) and ``__timestamp``
(timestamptz, microseconds; the record's commit time). A history table also has ``__change_type`` (string:
``+I -U +U -D``) right after the live columns. Columns added live (nullable, at the end) are inserted before
the first system column, so system columns stay last.

Iceberg has no fixed-size list: a vector column (a Polars ``Array``, ARRAY of fixed length) is stored as a list
whose field doc records the length (``fluss.vector.dimension=128``); :func:`vector_dtypes` reads it back so lake
reads give the ``Array`` dtype again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, cast

import polars as pl
import pyarrow as pa

from fluss_lake.exceptions import LakeTableMismatchError
from fluss_lake.metadata.partition import partition_name_of
from fluss_lake.metadata.schema import Schema

__all__ = [
    "HISTORY_COLUMNS",
    "SYSTEM_COLUMNS",
    "LakeKind",
    "arrow_type",
    "file_key",
    "lake_arrow_schema",
    "to_lake_rows",
    "vector_dtypes",
]

LakeKind = Literal["log", "primary-key", "history"]

BUCKET, OFFSET, TIMESTAMP, CHANGE_TYPE = "__bucket", "__offset", "__timestamp", "__change_type"
PARTITION = "_partition"  # the live scan's partition name column (not stored in the lake)
SYSTEM_COLUMNS = (BUCKET, OFFSET, TIMESTAMP)
HISTORY_COLUMNS = (CHANGE_TYPE, *SYSTEM_COLUMNS)
_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_DOC = b"doc"
_VECTOR_DOC = "fluss.vector.dimension={}"
_VECTOR_DOC_RE = re.compile(r"fluss\.vector\.dimension=([0-9]+)")


def _lake_field(name: str, dtype: pl.DataType, nullable: bool = True) -> pa.Field:
    """One lake field; a vector's field doc records its fixed length."""
    metadata = {_DOC: _VECTOR_DOC.format(dtype.size).encode()} if isinstance(dtype, pl.Array) else None
    return pa.field(name, arrow_type(dtype), nullable=nullable, metadata=metadata)


def arrow_type(dtype: pl.DataType) -> pa.DataType:
    """The Arrow type Iceberg stores for a live column type (TINYINT/SMALLINT widen to int, times to micros).

    Elements, map values and ROW fields are optional in the lake even where the live type says NOT NULL (the
    live table checks that on every write; Arrow cannot cast a null ROW whose NOT NULL field is unset).
    """
    if dtype in (pl.Int8(), pl.Int16(), pl.Int32()):
        return pa.int32()
    simple = {
        pl.Int64(): pa.int64(),
        pl.Float32(): pa.float32(),
        pl.Float64(): pa.float64(),
        pl.Boolean(): pa.bool_(),
        pl.String(): pa.string(),
        pl.Binary(): pa.binary(),
        pl.Date(): pa.date32(),
        pl.Time(): pa.time64("us"),
    }
    if dtype in simple:
        return simple[dtype]
    if isinstance(dtype, pl.Datetime):
        return pa.timestamp("us", tz="UTC" if dtype.time_zone else None)
    if isinstance(dtype, pl.Decimal):
        return pa.decimal128(dtype.precision, dtype.scale)
    # polars annotates `.inner` and `Field.dtype` as class-or-instance, but their constructors always store an
    # instance (parse_into_dtype)
    if isinstance(dtype, pl.List | pl.Array):
        return pa.list_(_lake_field("element", cast(pl.DataType, dtype.inner)))
    if isinstance(dtype, pl.Map):
        key, value = cast(pl.DataType, dtype.key), cast(pl.DataType, dtype.value)
        return pa.map_(_lake_field("key", key, False), _lake_field("value", value))
    if isinstance(dtype, pl.Struct):
        return pa.struct([_lake_field(f.name, cast(pl.DataType, f.dtype)) for f in dtype.fields])
    raise LakeTableMismatchError(
        f"column type {dtype} has no Iceberg mapping; use a Fluss type (INT, BIGINT, "
        "STRING, DECIMAL, TIMESTAMP_LTZ, ARRAY, MAP, ROW, ...)"
    )


def _restored(dtype: pl.DataType, field: pa.Field) -> pl.DataType:
    """`dtype` (what a lake read gives for `field`) with every list whose doc records a length as an ``Array``."""
    if isinstance(dtype, pl.List) and isinstance(field.type, pa.ListType | pa.LargeListType):
        inner = _restored(cast(pl.DataType, dtype.inner), field.type.value_field)
        doc = (field.metadata or {}).get(_DOC, b"").decode()
        match = _VECTOR_DOC_RE.fullmatch(doc)
        return pl.Array(inner, int(match.group(1))) if match else pl.List(inner)
    if isinstance(dtype, pl.Map) and isinstance(field.type, pa.MapType):
        key = _restored(cast(pl.DataType, dtype.key), field.type.key_field)
        return pl.Map(key, _restored(cast(pl.DataType, dtype.value), field.type.item_field))
    if isinstance(dtype, pl.Struct) and isinstance(field.type, pa.StructType):
        fields = {f.name: f for f in field.type}
        return pl.Struct({f.name: _restored(cast(pl.DataType, f.dtype), fields[f.name]) for f in dtype.fields})
    return dtype


def vector_dtypes(lake_schema: pa.Schema, dtypes: pl.Schema) -> dict[str, pl.DataType]:
    """The columns of a lake read (`dtypes`, from the lake's Arrow schema with field docs) that hold vectors,
    with the Polars dtype that gives them their fixed length (``Array``) again.

    Examples
    --------
    >>> from fluss_lake import Schema
    >>> lake = lake_arrow_schema(Schema.of({"id": "INT", "emb": pl.Array(pl.Float32, 4)}), "log")
    >>> vector_dtypes(lake, pl.Schema({"id": pl.Int32, "emb": pl.List(pl.Float32)}))
    {'emb': Array(Float32, shape=(4,))}
    """
    restored = {f.name: _restored(dtypes[f.name], f) for f in lake_schema if f.name in dtypes}
    return {name: dtype for name, dtype in restored.items() if dtype != dtypes[name]}


def lake_arrow_schema(schema: Schema, kind: LakeKind) -> pa.Schema:
    """The Arrow schema of the lake table of `kind` for a live schema (nullability preserved, system columns required).

    Examples
    --------
    >>> from fluss_lake import Schema
    >>> s = lake_arrow_schema(Schema.of({"id": "BIGINT", "n": "TINYINT"}, primary_key=["id"]), "history")
    >>> [(f.name, str(f.type), f.nullable) for f in s][:3]
    [('id', 'int64', False), ('n', 'int32', True), ('__change_type', 'string', False)]
    """
    fields = [_lake_field(c.name, c.dtype, c.nullable) for c in schema.columns]
    if kind == "history":
        fields.append(pa.field(CHANGE_TYPE, pa.string(), nullable=False))
    fields += [
        pa.field(BUCKET, pa.int32(), nullable=False),
        pa.field(OFFSET, pa.int64(), nullable=False),
        pa.field(TIMESTAMP, _TIMESTAMP_TYPE, nullable=False),
    ]
    return pa.schema(fields)


def to_lake_rows(log: pl.DataFrame, target: pa.Schema) -> pa.Table:
    """Rows of a live log scan (``_bucket, _offset, _change_type, _commit_timestamp`` + columns) in lake form."""
    renamed = log.rename({"_bucket": BUCKET, "_offset": OFFSET, "_commit_timestamp": TIMESTAMP})
    if PARTITION in renamed.columns and PARTITION not in target.names:
        renamed = renamed.drop(PARTITION)
    if CHANGE_TYPE in target.names:
        renamed = renamed.with_columns(pl.col("_change_type").cast(pl.String).alias(CHANGE_TYPE))
    return conform(renamed, target)


def conform(frame: pl.DataFrame, target: pa.Schema) -> pa.Table:
    """Select, order and cast a frame to the lake table's Arrow schema (absent nullable columns become null)."""
    missing = [f.name for f in target if f.name not in frame.columns]
    if missing:
        frame = frame.with_columns([pl.lit(None).alias(name) for name in missing])
    table = frame.select(target.names).to_arrow()
    return table.cast(target)


def system_names(kind: LakeKind) -> Sequence[str]:
    """System columns of a lake table of `kind`, in order."""
    return HISTORY_COLUMNS if kind == "history" else SYSTEM_COLUMNS


def file_key(
    iceberg_table: Any, data_file: Any, live_schema: Schema, partition_keys: Sequence[str]
) -> tuple[str | None, int]:
    """``(Fluss partition name or None, bucket)`` of a lake data file, from its identity partition values."""
    spec = iceberg_table.specs()[data_file.spec_id]
    names = [iceberg_table.schema().find_field(f.source_id).name for f in spec.fields]
    values = dict(zip(names, data_file.partition, strict=False))
    if not partition_keys:
        return None, int(values[BUCKET])
    dtypes = live_schema.polars_schema
    row = {k: _from_iceberg(values[k], dtypes[k]) for k in partition_keys}
    return partition_name_of(row, partition_keys, dtypes), int(values[BUCKET])


def _from_iceberg(value: Any, dtype: pl.DataType) -> Any:
    """A partition value as Iceberg stores it in manifests (days, micros) back as the Python value."""
    import datetime as dt

    if isinstance(dtype, pl.Date) and isinstance(value, int):
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if isinstance(dtype, pl.Datetime) and isinstance(value, int):
        tz = dt.UTC if dtype.time_zone else None
        return dt.datetime(1970, 1, 1, tzinfo=tz) + dt.timedelta(microseconds=value)
    if isinstance(dtype, pl.Time) and isinstance(value, int):
        return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=value)).time()
    return value
