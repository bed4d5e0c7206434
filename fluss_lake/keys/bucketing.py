"""Assign each written row to a bucket, the way a Fluss client does (``BucketingFunction.of(lakeFormat)``).

The hash depends on the table's lake format (``table.datalake.format``): tables without a lake format (or
with ``lance``) hash Fluss's compacted key with Fluss's murmur; ``iceberg`` tables use Iceberg's
``bucket[N]`` transform on their single bucket-key column, so live bucket ``b`` holds exactly the rows of
the lake's ``bucket(key, N)`` partition ``b``. ``paimon`` bucketing is not implemented.

:func:`encode_primary_key_hash` is the persisted 64-bit key hash of the primary-key index.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.keys.hashing import (
    ByteRanges,
    KeyBytes,
    check_num_buckets,
    fluss_murmur_bucket,
    fluss_varint_bucket,
    hash64,
    iceberg_bucket,
)
from fluss_lake.keys.key_encoding import (
    assemble_segments,
    check_key_columns,
    column_label,
    compacted_key_segments,
    encode_compacted_key,
    encode_iceberg_key,
)
from fluss_lake.metadata.descriptor import TableDescriptor, TableInfo
from fluss_lake.options import DATALAKE_FORMAT

__all__ = [
    "LakeFormat",
    "DATALAKE_FORMAT",
    "BucketingFunction",
    "FlussBucketingFunction",
    "IcebergBucketingFunction",
    "assign_buckets",
    "buckets_of",
    "split_by_bucket",
    "check_bucket_key_types",
    "encode_primary_key_hash",
]


#: Names accepted by :meth:`BucketingFunction.of` (case-insensitive); ``None`` = no lake format = ``"fluss"``.
LakeFormat = Literal["fluss", "lance", "iceberg", "paimon"]

KeyColumns = Sequence[pa.Array | pa.ChunkedArray]


def _compacted_key_bytes(key_columns: KeyColumns, names: Sequence[str] | None) -> KeyBytes:
    """Compacted keys; a key made of one segment (a single int/float/date... column) is left in place, unpacked."""
    arrays = check_key_columns(key_columns, names)
    segments = [seg for i, a in enumerate(arrays) for seg in compacted_key_segments(a, column_label(names, i))]
    if len(segments) == 1:
        only = segments[0]
        return ByteRanges(only.pool, only.starts, only.lengths)
    return assemble_segments(segments, len(arrays[0]))


class BucketingFunction(ABC):
    """Maps key columns to bucket ids; one implementation per lake format (``BucketingFunction.of``)."""

    name: ClassVar[str]

    @abstractmethod
    def encode_key(self, key_columns: KeyColumns, *, names: Sequence[str] | None = None) -> pa.Array:
        """The key bytes this function hashes (a binary array)."""

    @abstractmethod
    def bucket(
        self, key_columns: KeyColumns, num_buckets: int, *, names: Sequence[str] | None = None
    ) -> npt.NDArray[np.int32]:
        """Bucket id of each row, in ``[0, num_buckets)``."""

    @staticmethod
    def of(lake_format: str | None) -> BucketingFunction:
        """The bucketing function of a ``table.datalake.format`` value (``None`` = no lake format).

        Examples
        --------
        >>> BucketingFunction.of(None).name, BucketingFunction.of("iceberg").name
        ('fluss', 'iceberg')
        """
        key = None if lake_format is None else str(lake_format).strip().lower()
        if key in _UNSUPPORTED:
            raise InvalidConfigError(
                f"{DATALAKE_FORMAT}={lake_format!r}: {key} bucketing is not supported by fluss-lake; "
                f"use one of {sorted(k for k in _FUNCTIONS if k)} or no lake format"
            )
        try:
            return _FUNCTIONS[key]()
        except KeyError:
            raise InvalidConfigError(
                f"unknown {DATALAKE_FORMAT}={lake_format!r}; choose one of "
                f"{sorted(k for k in _FUNCTIONS if k)} or leave it unset"
            ) from None


@dataclass(frozen=True, slots=True)
class FlussBucketingFunction(BucketingFunction):
    """Fluss's default: murmur of the compacted key (no lake format, ``lance``)."""

    name: ClassVar[str] = "fluss"

    def encode_key(self, key_columns: KeyColumns, *, names: Sequence[str] | None = None) -> pa.Array:
        """Compacted key bytes."""
        return encode_compacted_key(key_columns, names=names)

    def bucket(
        self, key_columns: KeyColumns, num_buckets: int, *, names: Sequence[str] | None = None
    ) -> npt.NDArray[np.int32]:
        """Fluss murmur bucket of the compacted key."""
        n_buckets = check_num_buckets(num_buckets)
        return fluss_murmur_bucket(_compacted_key_bytes(key_columns, names), n_buckets)


def _core_buckets_like_fluss(t: pa.DataType) -> bool:
    """True if ``pyiceberg_core``'s bucket transform of this Arrow type equals murmur3 of Fluss's Iceberg key.

    Checked by the hypothesis tests; other types (time, other timestamp units, date64, floats, views,
    other decimal widths) go through :func:`encode_iceberg_key` and our own murmur3.
    """
    return bool(
        pa.types.is_int32(t)
        or pa.types.is_int64(t)
        or pa.types.is_date32(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_decimal128(t)
        or (pa.types.is_timestamp(t) and t.unit == "us" and t.tz is None)
    )


@dataclass(frozen=True, slots=True)
class IcebergBucketingFunction(BucketingFunction):
    """Iceberg's ``bucket[N]``: ``(murmur3_x86_32(single-value bytes, 0) & 0x7fffffff) % N``, one key column."""

    name: ClassVar[str] = "iceberg"

    def _column(self, key_columns: KeyColumns, names: Sequence[str] | None) -> pa.Array:
        """The single key column, checked."""
        if len(key_columns) != 1:
            raise InvalidConfigError(
                f"an {DATALAKE_FORMAT}=iceberg table buckets by exactly one column, got {len(key_columns)}; "
                "set bucket.key to a single column"
            )
        (array,) = check_key_columns(key_columns, names)
        return array

    def encode_key(self, key_columns: KeyColumns, *, names: Sequence[str] | None = None) -> pa.Array:
        """Iceberg single-value key bytes."""
        array = self._column(key_columns, names)
        return encode_iceberg_key(array, name=None if names is None else names[0])

    def bucket(
        self, key_columns: KeyColumns, num_buckets: int, *, names: Sequence[str] | None = None
    ) -> npt.NDArray[np.int32]:
        """Iceberg bucket; uses ``pyiceberg_core`` (Rust) for the types where it equals Fluss's encoding."""
        n_buckets = check_num_buckets(num_buckets)
        array = self._column(key_columns, names)
        if len(array) == 0 or not _core_buckets_like_fluss(array.type):
            return iceberg_bucket(self.encode_key([array], names=names), n_buckets)
        from pyiceberg_core import transform  # imported on first use: keeps `import fluss_lake` light

        result = transform.bucket(array, n_buckets)
        return np.asarray(result.to_numpy(zero_copy_only=False), dtype=np.int32)


_FUNCTIONS: dict[str | None, Callable[[], BucketingFunction]] = {
    None: FlussBucketingFunction,
    "fluss": FlussBucketingFunction,
    "lance": FlussBucketingFunction,
    "iceberg": IcebergBucketingFunction,
}
_UNSUPPORTED = ("paimon", "hudi")


def assign_buckets(
    key_columns: KeyColumns,
    num_buckets: int,
    *,
    lake_format: str | None = None,
    names: Sequence[str] | None = None,
) -> npt.NDArray[np.int32]:
    """Bucket id of each row from its bucket-key columns, as the Fluss client computes it.

    Parameters
    ----------
    key_columns
        The bucket-key columns in bucket-key order, all the same length, with no nulls.
    num_buckets
        ``bucket.num`` of the table (or partition).
    lake_format
        ``table.datalake.format`` (:data:`LakeFormat`, case-insensitive): ``None``/``"fluss"``/``"lance"``
        (Fluss murmur of the compacted key) or ``"iceberg"`` (Iceberg ``bucket[N]`` of the single key
        column). ``"paimon"`` is rejected.
    names
        Column names for error messages.

    Returns
    -------
    numpy.ndarray
        ``int32`` bucket per row.

    Raises
    ------
    NullPrimaryKeyError
        If a key column holds a null.
    InvalidConfigError
        For ``paimon``/unknown lake formats, a bad ``num_buckets``, or an Iceberg key that is not one
        column of a supported type.

    Examples
    --------
    >>> assign_buckets([pa.array([1, 1], pa.int32())], 8).tolist()
    [4, 4]
    >>> assign_buckets([pa.array(["iceberg"])], 16, lake_format="iceberg").tolist()
    [9]
    """
    return BucketingFunction.of(lake_format).bucket(key_columns, num_buckets, names=names)


def encode_primary_key_hash(key_columns: KeyColumns, *, names: Sequence[str] | None = None) -> npt.NDArray[np.uint64]:
    """Persisted 64-bit key hash of each row: ``hash64(encode_compacted_key(key_columns))`` (XXH64, seed 0).

    A single column whose compacted form is one fixed-layout segment (integers, floats, dates, millisecond
    timestamps, decimals up to precision 18) is hashed in place without packing the keys first; the value
    is the same.

    Examples
    --------
    >>> h = encode_primary_key_hash([pa.array([1, 2], pa.int32()), pa.array(["a", "b"])])
    >>> h.dtype.name, len(set(h.tolist()))
    ('uint64', 2)
    """
    return hash64(_compacted_key_bytes(key_columns, names))


def buckets_of(info: TableInfo, frame: pl.DataFrame) -> npt.NDArray[np.int32]:
    """Bucket of every row of `frame` by the table's bucket key (all zero, without hashing, for one bucket).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> info = conn.create_table("d.t", schema={"id": "INT"}, primary_key=["id"], bucket_num=8)
    >>> buckets_of(info, pl.DataFrame({"id": [1, 1]}, schema={"id": pl.Int32})).tolist()
    [4, 4]
    """
    if info.bucket_num == 1:
        return np.zeros(frame.height, dtype=np.int32)
    if len(info.bucket_keys) == 1:  # one BIGINT/INT key of Fluss's bucketing: hashed from the values (lookups)
        column = frame.get_column(info.bucket_keys[0])
        if column.dtype in _VARINT_KEYS and not column.has_nulls() and _fluss_bucketed(info):
            values = column.to_numpy()
            unsigned = values.view(np.uint64) if column.dtype == pl.Int64 else values.view(np.uint32)
            return fluss_varint_bucket(unsigned, info.bucket_num)
    return assign_buckets(
        [frame.get_column(k).to_arrow() for k in info.bucket_keys],
        info.bucket_num,
        lake_format=info.options.get(DATALAKE_FORMAT),
        names=list(info.bucket_keys),
    )


_VARINT_KEYS = (pl.Int64, pl.Int32)  # compacted as one LEB128 varint of the two's complement


def _fluss_bucketed(info: TableInfo) -> bool:
    """Whether the table's lake format buckets with Fluss's murmur (no lake format, ``fluss`` or ``lance``)."""
    lake_format = info.options.get(DATALAKE_FORMAT)
    return lake_format is None or str(lake_format).strip().lower() in ("fluss", "lance")


def check_bucket_key_types(descriptor: TableDescriptor) -> None:
    """Raise InvalidConfigError if the table's lake format cannot bucket its bucket key's type (Iceberg tables)."""
    keys = descriptor.resolved_bucket_keys()
    if descriptor.options.get(DATALAKE_FORMAT) == "iceberg" and keys:
        key = keys[0]
        empty = pl.Series(key, [], dtype=descriptor.schema.column(key).dtype).to_arrow()
        encode_iceberg_key(empty, name=key)  # raises InvalidConfigError for types Iceberg cannot bucket


def split_by_bucket(frame: pl.DataFrame, buckets: np.ndarray) -> dict[int, pl.DataFrame]:
    """Rows of each bucket, write order kept."""
    if frame.height == 0:
        return {}
    if buckets.min() == buckets.max():
        return {int(buckets[0]): frame}
    # One gather in bucket order (stable: write order kept), then zero-copy slices, buckets in order of first
    # appearance: a small write batch pays one Polars call here, not one per bucket.
    order = np.argsort(buckets, kind="stable")
    ordered = buckets[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(order)]
    gathered = frame[order]
    runs = sorted(zip(starts.tolist(), ends.tolist(), strict=True), key=lambda run: order[run[0]])
    return {int(ordered[start]): gathered.slice(start, end - start) for start, end in runs}
