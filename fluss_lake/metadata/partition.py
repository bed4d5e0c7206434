"""Partitions: the value strings and names Fluss gives them, and the record the store keeps of each one.

A partition value is a column value rendered as a string the way Fluss renders it (``PartitionUtils`` /
``PartitionNameConverters``); a partition *name* joins a partition's values with ``$`` in partition-key order.
Values must be 1-200 characters of ``[A-Za-z0-9_-]`` and new ones must not start with ``__``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from fluss_lake.exceptions import InvalidPartitionError

__all__ = [
    "PartitionInfo",
    "PARTITION_KEY_TYPES",
    "is_partition_key_type",
    "value_string",
    "partition_name",
    "partition_names",
    "partition_name_of",
    "with_partition_names",
    "check_partition_value",
    "spec_of",
]

_VALID_VALUE = re.compile(r"^[A-Za-z0-9_\-]{1,200}$")
PARTITION_KEY_TYPES = (
    "STRING",
    "CHAR",
    "BOOLEAN",
    "BINARY",
    "BYTES",
    "TINYINT",
    "SMALLINT",
    "INT",
    "BIGINT",
    "FLOAT",
    "DOUBLE",
    "DATE",
    "TIME",
    "TIMESTAMP",
    "TIMESTAMP_LTZ",
)
_EPOCH = dt.datetime(1970, 1, 1)


def is_partition_key_type(dtype: pl.DataType) -> bool:
    """Whether Fluss allows this column type as a partition key."""
    return isinstance(
        dtype,
        (
            pl.String,
            pl.Boolean,
            pl.Binary,
            pl.Int8,
            pl.Int16,
            pl.Int32,
            pl.Int64,
            pl.Float32,
            pl.Float64,
            pl.Date,
            pl.Time,
            pl.Datetime,
        ),
    )


def _java_float(value: float, single: bool) -> str:
    """Java's ``Float/Double.toString`` (shortest digits; scientific outside [1e-3, 1e7)), ``.`` -> ``_``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    number = np.float32(value) if single else np.float64(value)
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = np.format_float_positional(number, unique=True, trim="0")
    else:
        mantissa, exponent = np.format_float_scientific(number, unique=True, trim="0").split("e")
        text = f"{mantissa}E{int(exponent)}"
    return text.replace(".", "_")


def _timestamp(value: dt.datetime) -> str:
    """``yyyy-MM-dd-HH-mm-ss_`` + the fraction of a second without trailing zeros (Fluss's timestamp form)."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    fraction = f"{value.microsecond:06d}".rstrip("0")
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}-{value.hour:02d}-{value.minute:02d}-"
        f"{value.second:02d}_{fraction}"
    )


def value_string(value: object, dtype: pl.DataType) -> str:
    """One column value as Fluss writes it in a partition name.

    Examples
    --------
    >>> value_string(1.5, pl.Float64()), value_string(True, pl.Boolean()), value_string(b"\\x0a\\xff", pl.Binary())
    ('1_5', 'true', '0aff')
    >>> value_string(dt.date(2024, 11, 11), pl.Date()), value_string(1e10, pl.Float64())
    ('2024-11-11', '1_0E10')
    """
    if value is None:
        raise InvalidPartitionError("a partition value cannot be null; give every row a value in each partition column")
    if isinstance(dtype, pl.Boolean):
        return "true" if value else "false"
    if isinstance(dtype, pl.Binary):
        return bytes(value).hex()  # type: ignore[call-overload]  # a Binary column holds bytes
    if isinstance(dtype, (pl.Float32, pl.Float64)):
        return _java_float(float(value), isinstance(dtype, pl.Float32))  # type: ignore[arg-type]
    if isinstance(dtype, pl.Date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"  # type: ignore[attr-defined]
    if isinstance(dtype, pl.Time):
        t: dt.time = value  # type: ignore[assignment]
        return f"{t.hour:02d}-{t.minute:02d}-{t.second:02d}_{t.microsecond // 1000:03d}"
    if isinstance(dtype, pl.Datetime):
        return _timestamp(value)  # type: ignore[arg-type]
    return str(value)


def check_partition_value(value: str, *, creating: bool = True) -> str:
    """Return `value` if Fluss accepts it as a partition value, else raise :class:`InvalidPartitionError`."""
    if not isinstance(value, str) or not _VALID_VALUE.fullmatch(value):
        raise InvalidPartitionError(
            f"partition value {value!r} is invalid: use 1-200 characters of letters, digits, '_' and '-' "
            "(floats are written with '_' for '.', e.g. '1_5')"
        )
    if creating and value.startswith("__"):
        raise InvalidPartitionError(f"partition value {value!r} is invalid: values starting with '__' are reserved")
    return value


def partition_name(values: Sequence[str]) -> str:
    """Values joined by ``$`` (Fluss's partition name)."""
    return "$".join(values)


def partition_name_of(
    row: Mapping[str, object], partition_keys: Sequence[str], dtypes: Mapping[str, pl.DataType]
) -> str:
    """The partition name of one row given as a mapping of its partition columns (a single key's partition).

    Examples
    --------
    >>> dtypes = {"region": pl.String, "day": pl.Int32}
    >>> partition_name_of({"region": "eu", "day": 1, "id": 7}, ["region", "day"], dtypes)
    'eu$1'
    """
    return partition_name([value_string(row[k], dtypes[k]) for k in partition_keys])


def with_partition_names(
    frame: pl.DataFrame | pl.LazyFrame,
    partition_keys: Sequence[str],
    dtypes: Mapping[str, pl.DataType],
    *,
    column: str = "__partition",
    check: bool = False,
) -> pl.LazyFrame:
    """`frame` (lazily) with a String column `column` holding each row's partition name: the one definition of a
    row's partition, computed once per distinct partition, not per row. With `check`, each value must be one Fluss
    accepts for a new partition.

    Examples
    --------
    >>> frame = pl.LazyFrame({"day": ["20260101", "20260102"], "eu": [True, False], "v": [1, 2]})
    >>> with_partition_names(frame, ["day", "eu"], frame.collect_schema()).collect()["__partition"].to_list()
    ['20260101$true', '20260102$false']
    """
    keys = list(partition_keys)
    lazy = frame.lazy()
    distinct = lazy.select(keys).unique(maintain_order=True).collect()
    names = []
    for values in distinct.iter_rows():
        strings = [value_string(v, dtypes[k]) for k, v in zip(keys, values, strict=True)]
        names.append(partition_name([check_partition_value(s) for s in strings] if check else strings))
    named = distinct.with_columns(pl.Series(column, names, dtype=pl.String))
    return lazy.join(named.lazy(), on=keys, how="left", maintain_order="left", nulls_equal=True)


def partition_names(
    frame: pl.DataFrame | pl.LazyFrame,
    partition_keys: Sequence[str],
    dtypes: Mapping[str, pl.DataType],
    *,
    check: bool = False,
) -> pl.Series:
    """The partition name of every row of `frame` (which holds the partition columns), as a Series.

    Examples
    --------
    >>> frame = pl.DataFrame({"region": ["eu", "us", "eu"], "day": [1, 2, 1]})
    >>> partition_names(frame, ["region", "day"], frame.schema).to_list()
    ['eu$1', 'us$2', 'eu$1']
    """
    keys = list(partition_keys)
    named = with_partition_names(frame.lazy().select(keys), keys, dtypes, column="__partition_name", check=check)
    return named.collect().get_column("__partition_name")


def spec_of(partition_keys: Sequence[str], spec: str | Mapping[str, object]) -> dict[str, str]:
    """A partition spec (column -> value string) from a name (``"us$2024"``) or a mapping, checked for the keys."""
    if isinstance(spec, str):
        values = spec.split("$")
        if len(values) != len(partition_keys):
            raise InvalidPartitionError(
                f"partition name {spec!r} has {len(values)} value(s); this table is "
                f"partitioned by {list(partition_keys)}"
            )
        return dict(zip(partition_keys, values, strict=True))
    if not isinstance(spec, Mapping) or set(spec) != set(partition_keys):
        raise InvalidPartitionError(
            f"a partition spec must give exactly the partition keys {list(partition_keys)}; got {spec!r}"
        )
    return {k: str(spec[k]) for k in partition_keys}


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition as the store keeps it: name, spec (column -> value string), a unique id and its creation time.

    Examples
    --------
    >>> p = PartitionInfo.new(("region", "day"), {"region": "eu", "day": "20241111"}, created_ms=0)
    >>> p.name, p.spec["day"]
    ('eu$20241111', '20241111')
    """

    name: str
    spec: Mapping[str, str]
    partition_id: str
    created_ms: int

    @classmethod
    def new(cls, partition_keys: Sequence[str], spec: Mapping[str, str], *, created_ms: int) -> PartitionInfo:
        """A fresh partition record for a checked spec."""
        values = [check_partition_value(spec[k]) for k in partition_keys]
        return cls(partition_name(values), {k: spec[k] for k in partition_keys}, uuid.uuid4().hex, created_ms)

    def to_json(self) -> dict:
        """Serializable form."""
        return {
            "name": self.name,
            "spec": dict(self.spec),
            "partition_id": self.partition_id,
            "created_ms": self.created_ms,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> PartitionInfo:
        """Inverse of :meth:`to_json`."""
        return cls(data["name"], dict(data["spec"]), data["partition_id"], data["created_ms"])
