"""Lake schemas: the live schema mapped to Iceberg types (FLUSS-SEMANTICS §7.3) plus the system columns.

A lake table holds the live columns, then ``__bucket`` (int), ``__offset`` (long) and ``__timestamp``
(timestamptz, microseconds; the record's commit time). A history table also has ``__change_type`` (string:
``+I -U +U -D``) right after the live columns. Columns added live (nullable, at the end) are inserted before
the first system column, so system columns stay last.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import polars as pl
import pyarrow as pa

from fluss_lake.exceptions import LakeTableMismatchError
from fluss_lake.metadata.schema import Schema

__all__ = ["HISTORY_COLUMNS", "SYSTEM_COLUMNS", "LakeKind", "arrow_type", "lake_arrow_schema", "to_lake_rows"]

LakeKind = Literal["log", "primary-key", "history"]

BUCKET, OFFSET, TIMESTAMP, CHANGE_TYPE = "__bucket", "__offset", "__timestamp", "__change_type"
SYSTEM_COLUMNS = (BUCKET, OFFSET, TIMESTAMP)
HISTORY_COLUMNS = (CHANGE_TYPE, *SYSTEM_COLUMNS)
_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def arrow_type(dtype: pl.DataType) -> pa.DataType:
    """The Arrow type Iceberg stores for a live column type (TINYINT/SMALLINT widen to int, times to micros)."""
    if dtype in (pl.Int8(), pl.Int16(), pl.Int32()):
        return pa.int32()
    simple = {pl.Int64(): pa.int64(), pl.Float32(): pa.float32(), pl.Float64(): pa.float64(),
              pl.Boolean(): pa.bool_(), pl.String(): pa.string(), pl.Binary(): pa.binary(), pl.Date(): pa.date32(),
              pl.Time(): pa.time64("us")}
    if dtype in simple:
        return simple[dtype]
    if isinstance(dtype, pl.Datetime):
        return pa.timestamp("us", tz="UTC" if dtype.time_zone else None)
    if isinstance(dtype, pl.Decimal):
        return pa.decimal128(dtype.precision, dtype.scale)
    if isinstance(dtype, pl.List | pl.Array):
        return pa.list_(arrow_type(dtype.inner))
    if isinstance(dtype, pl.Struct):
        return pa.struct([pa.field(f.name, arrow_type(f.dtype)) for f in dtype.fields])
    raise LakeTableMismatchError(f"column type {dtype} has no Iceberg mapping; use a Fluss type (INT, BIGINT, "
                                 "STRING, DECIMAL, TIMESTAMP_LTZ, ARRAY, ROW, ...)")


def lake_arrow_schema(schema: Schema, kind: LakeKind) -> pa.Schema:
    """The Arrow schema of the lake table of `kind` for a live schema (nullability preserved, system columns required).

    Examples
    --------
    >>> from fluss_lake import Schema
    >>> s = lake_arrow_schema(Schema.of({"id": "BIGINT", "n": "TINYINT"}, primary_key=["id"]), "history")
    >>> [(f.name, str(f.type), f.nullable) for f in s][:3]
    [('id', 'int64', False), ('n', 'int32', True), ('__change_type', 'string', False)]
    """
    fields = [pa.field(c.name, arrow_type(c.dtype), nullable=c.nullable) for c in schema.columns]
    if kind == "history":
        fields.append(pa.field(CHANGE_TYPE, pa.string(), nullable=False))
    fields += [pa.field(BUCKET, pa.int32(), nullable=False), pa.field(OFFSET, pa.int64(), nullable=False),
               pa.field(TIMESTAMP, _TIMESTAMP_TYPE, nullable=False)]
    return pa.schema(fields)


def to_lake_rows(log: pl.DataFrame, target: pa.Schema) -> pa.Table:
    """Rows of a live log scan (``_bucket, _offset, _change_type, _commit_timestamp`` + columns) in lake form."""
    renamed = log.rename({"_bucket": BUCKET, "_offset": OFFSET, "_commit_timestamp": TIMESTAMP})
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
