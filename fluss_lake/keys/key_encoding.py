"""Vectorized key encoders: Arrow key columns -> one ``pa.BinaryArray`` of encoded keys, no per-row loop.

- :func:`encode_compacted_key` -- Fluss's compacted key (``CompactedKeyEncoder``), used for bucketing when
  the lake format is none/lance and for the persisted primary-key hash.
- :func:`encode_iceberg_key` -- Iceberg's single-value binary form (``IcebergKeyEncoder``), whose murmur3 is
  Iceberg's ``bucket[N]``.

Each column is first turned into *segments*: per-row byte ranges of one source buffer (a small ``uint8``
matrix built with numpy or a compiled varint loop, or an Arrow string array's data used as is). The rows'
offsets are summed from the segments' lengths, then each segment is copied into place by one compiled pass.

Fluss keeps TIME as milliseconds of the day, so finer Arrow time units are floored to milliseconds by both
encoders. Arrow timestamp units map to Fluss precisions: ``s``/``ms`` -> precision <= 3 (compact),
``us``/``ns`` -> precision 6/9 (millisecond + nano-of-millisecond).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from fluss_lake.exceptions import InvalidConfigError, InvalidTableError, NullPrimaryKeyError, SchemaMismatchError
from fluss_lake.keys import _hash_kernels  # type: ignore[attr-defined]

__all__ = [
    "encode_compacted_key",
    "encode_iceberg_key",
    "KeySegment",
    "check_key_columns",
    "column_label",
    "compacted_key_segments",
    "iceberg_key_segment",
    "assemble_segments",
]

_NANOS_PER_MILLI = 1_000_000
_MILLIS_PER_DAY = 86_400_000
_COMPACT_DECIMAL_PRECISION = 18  # Decimal.isCompact: unscaled value fits a long
_NARROW = 16  # fixed-size binary columns at most this wide are packed as matrices


@dataclass(frozen=True, slots=True)
class KeySegment:
    """Row ``i`` contributes ``pool[starts[i]:starts[i] + lengths[i]]`` to its key.

    A *narrow* segment has ``width`` set: its pool is an ``(n, width)`` row-major matrix
    (``starts[i] == i * width``, or later within the row for right-aligned bytes). A *wide* segment
    (string or binary data) has ``array`` set: an Arrow binary array holding exactly these bytes.
    """

    pool: np.ndarray  # uint8
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    width: int | None = None
    array: pa.Array | None = None

    @classmethod
    def of_matrix(cls, matrix: np.ndarray, lengths: np.ndarray | None = None) -> KeySegment:
        """Segment of an ``(n, w)`` ``uint8`` matrix; each row uses its first ``lengths[i]`` (default ``w``) bytes."""
        n, width = matrix.shape
        if lengths is None:
            lengths = np.full(n, width, dtype=np.int64)
        return cls(matrix.reshape(-1), np.arange(n, dtype=np.int64) * width, lengths, width)

    def is_full_matrix(self) -> bool:
        """True if every row uses the whole matrix row."""
        return self.width is not None and bool(np.all(self.lengths == self.width))


# --------------------------------------------------------------------------- small builders


def column_label(names: Sequence[str] | None, i: int) -> str:
    """Name of key column ``i`` for messages."""
    return repr(names[i]) if names is not None else f"#{i}"


def _fixed_values(array: pa.Array, dtype: str) -> np.ndarray:
    """Zero-copy numpy view of a fixed-width Arrow array's values (``dtype`` = storage type)."""
    return np.frombuffer(array.buffers()[1], dtype=dtype)[array.offset : array.offset + len(array)]


def _le_matrix(values: np.ndarray, dtype: str) -> KeySegment:
    """Little-endian bytes of each value as a full-width matrix segment."""
    le = np.ascontiguousarray(values, dtype=dtype)
    return KeySegment.of_matrix(le.view(np.uint8).reshape(le.size, np.dtype(dtype).itemsize))


def _varint_len(top: int) -> int:
    """LEB128 byte count of a non-negative int."""
    return max(1, (top.bit_length() + 6) // 7)


def _varint(values: np.ndarray) -> KeySegment:
    """Unsigned LEB128 of ``uint32``/``uint64`` values (Fluss ``writeInt``/``writeLong``) as a matrix segment."""
    unsigned = np.ascontiguousarray(values, dtype=np.uint64)
    n = unsigned.size
    width = _varint_len(int(unsigned.max())) if n else 1
    matrix = np.empty((n, width), dtype=np.uint8)
    lengths = np.empty(n, dtype=np.int64)
    _hash_kernels.varint_rows(unsigned, matrix, lengths)
    return KeySegment.of_matrix(matrix, lengths)


def _varint_int(values: np.ndarray) -> KeySegment:
    """LEB128 of the 32-bit two's complement of ``int32`` values (``-1 -> ff ff ff ff 0f``)."""
    return _varint(values.astype(np.int32).view(np.uint32))


def _varint_long(values: np.ndarray) -> KeySegment:
    """LEB128 of the 64-bit two's complement of ``int64`` values (negatives take 10 bytes)."""
    return _varint(values.astype(np.int64).view(np.uint64))


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Bit length of each ``uint64`` value (0 for 0)."""
    x = x.copy()
    bits = np.zeros(x.size, dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        big = (x >> np.uint64(shift)) != 0
        bits += big * shift
        x = np.where(big, x >> np.uint64(shift), x)
    return bits + (x != 0)


def _decimal_be_bytes(array: pa.Array) -> KeySegment:
    """Minimal big-endian two's-complement unscaled bytes of decimal128 values (``BigInteger.toByteArray``)."""
    n = len(array)
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8)[array.offset * 16 : (array.offset + n) * 16]
    raw = raw.reshape(n, 16)
    lo = np.ascontiguousarray(raw[:, :8]).view("<u8").ravel().astype(np.uint64)
    hi = np.ascontiguousarray(raw[:, 8:]).view("<u8").ravel().astype(np.uint64)
    negative = (hi >> np.uint64(63)) == 1
    mag_hi = np.where(negative, ~hi, hi)  # bitLength of a negative v is that of ~v
    mag_lo = np.where(negative, ~lo, lo)
    bits = np.where(mag_hi != 0, 64 + _bit_length(mag_hi), _bit_length(mag_lo))
    nbytes = bits // 8 + 1
    big_endian = np.ascontiguousarray(raw[:, ::-1])
    starts = np.arange(n, dtype=np.int64) * 16 + (16 - nbytes)
    return KeySegment(big_endian.reshape(-1), starts, nbytes.astype(np.int64), 16)


def _binary_like(array: pa.Array) -> KeySegment:
    """The raw bytes of a string/binary array, read in place from its values buffer."""
    t = array.type
    n = len(array)
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        pool = np.frombuffer(array.buffers()[1], dtype=np.uint8)[array.offset * width : (array.offset + n) * width]
        if width <= _NARROW:
            return KeySegment.of_matrix(pool.reshape(n, width))
        array = array.cast(pa.binary())
        return KeySegment(pool, np.arange(n, dtype=np.int64) * width, np.full(n, width, dtype=np.int64), None, array)
    if pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        return _binary_like(array.cast(pa.large_binary()))
    large = pa.types.is_large_binary(t) or pa.types.is_large_string(t)
    array = array.cast(pa.large_binary() if large else pa.binary())  # zero-copy for strings
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return KeySegment(np.zeros(0, dtype=np.uint8), empty, empty, None, array)
    all_offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if large else np.int32)
    offsets = all_offsets[array.offset : array.offset + n + 1].astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    pool = np.frombuffer(array.buffers()[2], dtype=np.uint8)[first:last] if last > first else np.zeros(0, np.uint8)
    return KeySegment(pool, offsets[:-1] - first, np.diff(offsets), None, array)


def _unit_to(values: np.ndarray, unit: str, per_second: int) -> np.ndarray:
    """Convert int64 time values in Arrow ``unit`` to ``per_second`` ticks, flooring finer units."""
    have = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[unit]
    if have <= per_second:
        return values.astype(np.int64) * (per_second // have)
    return np.floor_divide(values.astype(np.int64), have // per_second)


def _normalize(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Combine chunks and decode dictionaries."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def check_key_columns(columns: Sequence[pa.Array | pa.ChunkedArray], names: Sequence[str] | None) -> list[pa.Array]:
    """Normalise the key columns; reject an empty key, unequal lengths and nulls."""
    if len(columns) == 0:
        raise InvalidTableError("the key has no column; a primary or bucket key needs at least one column")
    if names is not None and len(names) != len(columns):
        raise SchemaMismatchError(f"got {len(columns)} key columns but {len(names)} names; pass one name per column")
    arrays = [_normalize(c) for c in columns]
    sizes = {len(a) for a in arrays}
    if len(sizes) > 1:
        raise SchemaMismatchError(f"key columns have different lengths {[len(a) for a in arrays]}; align them first")
    for i, a in enumerate(arrays):
        if a.null_count:
            first = int(np.flatnonzero(~np.asarray(a.is_valid()))[0])
            raise NullPrimaryKeyError(
                f"key column {column_label(names, i)} holds {a.null_count} null(s) (first at row {first}); "
                "key columns must not be null: fill or drop those rows before writing"
            )
    return arrays


# --------------------------------------------------------------------------- assembly


def assemble_segments(segments: list[KeySegment], n: int) -> pa.Array:
    """Concatenate each row's segments, in order, into one binary array (large if over 2 GiB): the rows'
    offsets first, then one compiled copy pass per segment."""
    row_len = np.zeros(n, dtype=np.int64)
    for seg in segments:
        row_len += seg.lengths
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_len, out=offsets[1:])
    total = int(offsets[-1])
    target = pa.large_binary() if total >= 2**31 else pa.binary()
    values = np.empty(total, dtype=np.uint8)
    cursor = offsets[:-1].copy()
    for seg in segments:
        _hash_kernels.append_rows(
            np.ascontiguousarray(seg.pool, dtype=np.uint8),
            np.ascontiguousarray(seg.starts, dtype=np.int64),
            np.ascontiguousarray(seg.lengths, dtype=np.int64),
            cursor,
            values,
        )
    offset_dtype = np.int64 if target == pa.large_binary() else np.int32
    return pa.Array.from_buffers(target, n, [None, pa.py_buffer(offsets.astype(offset_dtype)), pa.py_buffer(values)])


# --------------------------------------------------------------------------- compacted key


def compacted_key_segments(array: pa.Array, name: str) -> list[KeySegment]:
    """Segments of one non-null key column in Fluss's compacted key encoding."""
    t = array.type
    if pa.types.is_boolean(t):
        flags = np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.uint8)
        return [KeySegment.of_matrix(flags.reshape(-1, 1))]
    if pa.types.is_int8(t):
        return [_le_matrix(_fixed_values(array, "i1"), "<i1")]
    if pa.types.is_int16(t):
        return [_le_matrix(_fixed_values(array, "<i2"), "<i2")]
    if pa.types.is_int32(t) or pa.types.is_date32(t):
        return [_varint_int(_fixed_values(array, "<i4"))]
    if pa.types.is_date64(t):
        return [_varint_int(np.floor_divide(_fixed_values(array, "<i8"), _MILLIS_PER_DAY))]
    if pa.types.is_time(t):
        raw = _fixed_values(array, "<i4" if pa.types.is_time32(t) else "<i8")
        return [_varint_int(_unit_to(raw, t.unit, 1_000))]
    if pa.types.is_int64(t):
        return [_varint_long(_fixed_values(array, "<i8"))]
    if pa.types.is_float32(t):
        return [_le_matrix(_fixed_values(array, "<f4"), "<f4")]
    if pa.types.is_float64(t):
        return [_le_matrix(_fixed_values(array, "<f8"), "<f8")]
    if pa.types.is_timestamp(t):
        raw = _fixed_values(array, "<i8")
        if t.unit in ("s", "ms"):
            return [_varint_long(_unit_to(raw, t.unit, 1_000))]
        nanos = _unit_to(raw, t.unit, 1_000_000_000)
        millis = np.floor_divide(nanos, _NANOS_PER_MILLI)
        return [_varint_long(millis), _varint_int(nanos - millis * _NANOS_PER_MILLI)]
    if pa.types.is_decimal(t):
        array = _as_decimal128(array, name)
        if array.type.precision <= _COMPACT_DECIMAL_PRECISION:
            words = np.frombuffer(array.buffers()[1], dtype="<i8")  # two little-endian words per value
            return [_varint_long(words[2 * array.offset : 2 * (array.offset + len(array)) : 2])]
        be = _decimal_be_bytes(array)
        return [_varint_int(be.lengths), be]
    if _is_binary_like(t):
        data = _binary_like(array)
        return [_varint_int(data.lengths), data]
    raise InvalidTableError(
        f"key column {name} has Arrow type {t}, which has no Fluss key encoding; use BOOLEAN, TINYINT, SMALLINT, "
        "INT, BIGINT, FLOAT, DOUBLE, DECIMAL, DATE, TIME, TIMESTAMP, STRING or BYTES key columns (cast unsigned "
        "ints to a signed type)"
    )


def _is_binary_like(t: pa.DataType) -> bool:
    """String or binary of any layout."""
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _as_decimal128(array: pa.Array, name: str) -> pa.Array:
    """Cast any decimal of precision <= 38 to decimal128 (Fluss's maximum precision is 38)."""
    t = array.type
    if t.precision > 38:
        raise InvalidTableError(f"key column {name} is {t}; Fluss decimals allow a precision of at most 38")
    if pa.types.is_decimal128(t):
        return array
    return array.cast(pa.decimal128(t.precision, t.scale))


def encode_compacted_key(
    columns: Sequence[pa.Array | pa.ChunkedArray], *, names: Sequence[str] | None = None
) -> pa.BinaryArray | pa.LargeBinaryArray:
    """Encode key rows with Fluss's compacted key encoding (``CompactedKeyEncoder``), columns in key order.

    BOOLEAN/TINYINT 1 byte; SMALLINT 2 bytes LE; FLOAT/DOUBLE raw LE; INT/DATE/TIME unsigned LEB128 of the
    32-bit value; BIGINT LEB128 of the 64-bit value; STRING/BYTES varint length + bytes; DECIMAL with
    precision <= 18 the unscaled long, else length + minimal big-endian bytes; TIMESTAMP ``s``/``ms`` epoch
    millis, ``us``/``ns`` millis then nano-of-millisecond (floored).

    Parameters
    ----------
    columns
        One Arrow array per key column, all of the same length, none holding a null.
    names
        Column names for error messages (keyword-only).

    Returns
    -------
    pyarrow.BinaryArray
        One encoded key per row (a ``LargeBinaryArray`` if the keys exceed 2 GiB in total).

    Raises
    ------
    NullPrimaryKeyError
        If a key column holds a null.
    InvalidTableError
        If there is no column or a column's type has no key encoding.

    Examples
    --------
    >>> keys = encode_compacted_key([pa.array([1, -1], pa.int32()), pa.array([3, 5]), pa.array(["a", ""])])
    >>> [k.hex() for k in keys.to_pylist()]
    ['01030161', 'ffffffff0f0500']
    """
    arrays = check_key_columns(columns, names)
    segments = [seg for i, a in enumerate(arrays) for seg in compacted_key_segments(a, column_label(names, i))]
    return assemble_segments(segments, len(arrays[0]))


# --------------------------------------------------------------------------- iceberg key


def iceberg_key_segment(array: pa.Array, name: str) -> KeySegment:
    """The Iceberg single-value binary form of one non-null column, as one segment."""
    t = array.type
    if pa.types.is_int32(t) or pa.types.is_date32(t):
        return _le_matrix(_fixed_values(array, "<i4"), "<i8")
    if pa.types.is_date64(t):
        return _le_matrix(np.floor_divide(_fixed_values(array, "<i8"), _MILLIS_PER_DAY), "<i8")
    if pa.types.is_int64(t):
        return _le_matrix(_fixed_values(array, "<i8"), "<i8")
    if pa.types.is_time(t):
        raw = _fixed_values(array, "<i4" if pa.types.is_time32(t) else "<i8")
        return _le_matrix(_unit_to(raw, t.unit, 1_000) * 1_000, "<i8")  # Fluss TIME = millis of day
    if pa.types.is_timestamp(t) and t.tz is None:
        return _le_matrix(_unit_to(_fixed_values(array, "<i8"), t.unit, 1_000_000), "<i8")
    if pa.types.is_float32(t):
        return _le_matrix(_fixed_values(array, "<f4"), "<f4")
    if pa.types.is_float64(t):
        return _le_matrix(_fixed_values(array, "<f8"), "<f8")
    if pa.types.is_decimal(t):
        return _decimal_be_bytes(_as_decimal128(array, name))
    if _is_binary_like(t):
        return _binary_like(array)
    kind = "TIMESTAMP_LTZ (timestamp with a time zone)" if pa.types.is_timestamp(t) else f"Arrow type {t}"
    raise InvalidConfigError(
        f"key column {name} has {kind}, which the Iceberg bucket key does not support; use INT, BIGINT, DATE, "
        "TIME, TIMESTAMP, STRING, BYTES, DECIMAL, FLOAT or DOUBLE, or pick another bucket key"
    )


def encode_iceberg_key(
    column: pa.Array | pa.ChunkedArray, *, name: str | None = None
) -> pa.BinaryArray | pa.LargeBinaryArray:
    """Encode one key column in Iceberg's single-value binary form (``IcebergKeyEncoder``).

    INT/DATE and BIGINT as 8-byte LE longs; TIME and TIMESTAMP (no time zone) as 8-byte LE micros; STRING as
    UTF-8; BYTES as is; DECIMAL as minimal big-endian unscaled bytes; FLOAT/DOUBLE as 4/8 bytes LE.

    Parameters
    ----------
    column
        The single key column; no nulls.
    name
        Column name for error messages (keyword-only).

    Raises
    ------
    InvalidConfigError
        For TINYINT, SMALLINT, BOOLEAN, TIMESTAMP_LTZ and any other unsupported type.
    NullPrimaryKeyError
        If the column holds a null.

    Returns
    -------
    pyarrow.BinaryArray
        One encoded key per row (a ``LargeBinaryArray`` if the keys exceed 2 GiB in total).

    Examples
    --------
    >>> [k.hex() for k in encode_iceberg_key(pa.array([34], pa.int32())).to_pylist()]
    ['2200000000000000']
    """
    names = None if name is None else [name]
    (array,) = check_key_columns([column], names)
    segment = iceberg_key_segment(array, column_label(names, 0))
    return assemble_segments([segment], len(array))  # strings: their own buffers, cast to binary
