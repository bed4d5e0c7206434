"""The 64-bit index hash of a primary key, persisted in KV segments (so it must never change).

Full-key hash = ``hash64(compacted key bytes)``. When the bucket key is a strict prefix of the primary key,
the bucket-key hash takes the high 32 bits so all keys of one prefix sort together (prefix lookups).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa  # noqa: F401 - used by the doctest

from fluss_lake.keys import _hash_kernels  # type: ignore[attr-defined]
from fluss_lake.keys.bucketing import encode_primary_key_hash

__all__ = ["bigint_key_hashes", "index_hashes", "int_key_hashes", "prefix_ranges"]

#: Integer key columns hashed by one compiled loop (a varint takes at most 10 bytes of the kernel's 256).
_MAX_INT_COLUMNS = 25

_HIGH = np.uint64(0xFFFFFFFF00000000)
_SHIFT = np.uint64(32)


def _hash(frame: pl.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """hash64 of the compacted encoding of `columns`."""
    if len(columns) == 1:
        column = frame.get_column(columns[0])
        if column.dtype == pl.Int64 and not column.has_nulls():
            return bigint_key_hashes(column.to_numpy())
    elif 1 < len(columns) <= _MAX_INT_COLUMNS:
        series = [frame.get_column(c) for c in columns]
        if all(s.dtype in (pl.Int64, pl.Int32) and not s.has_nulls() for s in series):
            return int_key_hashes([s.to_numpy() for s in series])
    return encode_primary_key_hash([frame.get_column(c).to_arrow() for c in columns])


def bigint_key_hashes(values: np.ndarray) -> np.ndarray:
    """``hash64`` of the compacted encoding of one BIGINT key column, computed from the values directly.

    Equal, bit for bit, to ``encode_primary_key_hash([values])`` (a 64-bit varint, then XXH64 with seed 0; a
    test checks it at every varint length), without materializing the key bytes: one compiled loop per call.

    Examples
    --------
    >>> v = np.array([0, 300, -1], dtype=np.int64)
    >>> bool((bigint_key_hashes(v) == encode_primary_key_hash([pa.array(v)])).all())
    True
    """
    v = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    out = np.empty(len(v), dtype=np.uint64)
    _hash_kernels.bigint_hashes(v, out)
    return out


def int_key_hashes(columns: Sequence[np.ndarray]) -> np.ndarray:
    """``hash64`` of the compacted encoding of a key made of INT and BIGINT columns (no nulls), computed from the
    values: one compiled loop for the batch instead of building every key's bytes (a write's keys, a lookup's).

    Equal, bit for bit, to ``encode_primary_key_hash`` of the same columns (a property test checks it over any
    values, both widths mixed).

    Examples
    --------
    >>> a, b = np.array([1, -7], dtype=np.int64), np.array([300, 2**31 - 1], dtype=np.int32)
    >>> bool((int_key_hashes([a, b]) == encode_primary_key_hash([pa.array(a), pa.array(b)])).all())
    True
    """
    matrix = np.empty((len(columns), len(columns[0]) if len(columns) else 0), dtype=np.uint64)
    for row, values in zip(matrix, columns, strict=True):
        # INT is the varint of its 32-bit two's complement, BIGINT of its 64-bit one
        if values.dtype == np.int32:
            row[:] = values.view(np.uint32)
        else:
            row[:] = values.astype(np.int64, copy=False).view(np.uint64)
    out = np.empty(matrix.shape[1], dtype=np.uint64)
    _hash_kernels.int_key_hashes(matrix, out)
    return out


def index_hashes(frame: pl.DataFrame, primary_key: Sequence[str], prefix_key: Sequence[str] = ()) -> np.ndarray:
    """Index hash of every row's primary key."""
    full = _hash(frame, primary_key)
    if not prefix_key:
        return full
    return (_hash(frame, prefix_key) & _HIGH) | (full >> _SHIFT)


def prefix_ranges(frame: pl.DataFrame, prefix_key: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Half-open hash ranges ``[lo, hi)`` holding every key with each row's prefix (hi=0 means 2**64)."""
    lo = _hash(frame, prefix_key) & _HIGH
    hi = lo + np.uint64(1 << 32)  # wraps to 0 for the last range
    return lo, hi
