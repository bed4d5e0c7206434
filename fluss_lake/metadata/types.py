"""Column types: Fluss type names (``INT``, ``DECIMAL(10,2)``, ``TIMESTAMP_LTZ(3)``...) <-> Polars/Arrow.

A table stores Polars dtypes; Fluss names are accepted everywhere a type is asked for, so a Fluss user's
DDL carries over, and are used when a type is shown.
"""

from __future__ import annotations

import re
from typing import Literal, TypeAlias

import polars as pl
import pyarrow as pa

from fluss_lake.exceptions import InvalidTableError

__all__ = ["DataTypeLike", "to_polars_dtype", "fluss_type_name", "KEY_UNSUPPORTED", "is_key_supported"]

DataTypeLike: TypeAlias = str | pl.DataType | type[pl.DataType] | pa.DataType

_SIMPLE: dict[str, pl.DataType] = {
    "BOOLEAN": pl.Boolean(),
    "TINYINT": pl.Int8(),
    "SMALLINT": pl.Int16(),
    "INT": pl.Int32(),
    "INTEGER": pl.Int32(),
    "BIGINT": pl.Int64(),
    "FLOAT": pl.Float32(),
    "DOUBLE": pl.Float64(),
    "STRING": pl.String(),
    "BYTES": pl.Binary(),
    "DATE": pl.Date(),
}
_PARAM = re.compile(r"^\s*([A-Z_]+)\s*(?:\(\s*([0-9]+)\s*(?:,\s*([0-9]+)\s*)?\))?\s*$")


def _time_unit(precision: int) -> Literal["ms", "us", "ns"]:
    """Smallest Polars time unit that keeps `precision` fractional digits."""
    return "ms" if precision <= 3 else ("us" if precision <= 6 else "ns")


def _parse(name: str) -> pl.DataType:
    """Parse a Fluss type name."""
    match = _PARAM.match(name.upper())
    if match is None:
        raise InvalidTableError(
            f"unknown column type {name!r}; use a Fluss type name such as INT, "
            "BIGINT, STRING, DECIMAL(10,2), TIMESTAMP(3), TIMESTAMP_LTZ(6), or a Polars dtype"
        )
    base, p1, p2 = match.group(1), match.group(2), match.group(3)
    if base in _SIMPLE and p1 is None:
        return _SIMPLE[base]
    if base in ("CHAR", "VARCHAR"):
        return pl.String()
    if base in ("BINARY", "VARBINARY"):
        return pl.Binary()
    if base == "DECIMAL":
        return pl.Decimal(int(p1 or 10), int(p2 or 0))
    if base == "TIMESTAMP":
        return pl.Datetime(_time_unit(int(p1 if p1 is not None else 6)))
    if base == "TIMESTAMP_LTZ":
        return pl.Datetime(_time_unit(int(p1 if p1 is not None else 6)), "UTC")
    if base == "TIME":
        return pl.Time()
    raise InvalidTableError(
        f"unknown column type {name!r}; use a Fluss type name such as INT, BIGINT, "
        "STRING, DECIMAL(10,2), TIMESTAMP(3), or a Polars dtype"
    )


def to_polars_dtype(dtype: DataTypeLike) -> pl.DataType:
    """Normalize a Fluss type name, Polars dtype or Arrow type to a Polars dtype instance.

    Examples
    --------
    >>> to_polars_dtype("DECIMAL(10,2)")
    Decimal(precision=10, scale=2)
    >>> to_polars_dtype("TIMESTAMP_LTZ(3)")
    Datetime(time_unit='ms', time_zone='UTC')
    """
    if isinstance(dtype, str):
        return _parse(dtype)
    if isinstance(dtype, pa.DataType):
        return pl.Series(pa.array([], type=dtype)).dtype
    if isinstance(dtype, type) and issubclass(dtype, pl.DataType):
        return dtype()
    if isinstance(dtype, pl.DataType):
        return dtype
    raise InvalidTableError(f"cannot use {dtype!r} as a column type; pass a Fluss type name or a Polars dtype")


def fluss_type_name(dtype: pl.DataType) -> str:
    """The Fluss name of a Polars dtype (``Int32`` -> ``INT``)."""
    for name, simple in _SIMPLE.items():
        if name != "INTEGER" and dtype == simple:
            return name
    if isinstance(dtype, pl.Decimal):
        return f"DECIMAL({dtype.precision},{dtype.scale})"
    if isinstance(dtype, pl.Datetime):
        precision = {"ms": 3, "us": 6, "ns": 9}[dtype.time_unit]
        return f"TIMESTAMP_LTZ({precision})" if dtype.time_zone else f"TIMESTAMP({precision})"
    if dtype == pl.Time():
        return "TIME"
    if isinstance(dtype, pl.List | pl.Array):
        return f"ARRAY<{fluss_type_name(to_polars_dtype(dtype.inner))}>"
    if isinstance(dtype, pl.Struct):
        return "ROW<" + ", ".join(f"{f.name} {fluss_type_name(to_polars_dtype(f.dtype))}" for f in dtype.fields) + ">"
    return str(dtype)


KEY_UNSUPPORTED = "ARRAY, MAP and ROW"


def is_key_supported(dtype: pl.DataType) -> bool:
    """Whether a column of this type may be part of a primary key or bucket key."""
    return not isinstance(dtype, pl.List | pl.Array | pl.Struct | pl.Object | pl.Null)
