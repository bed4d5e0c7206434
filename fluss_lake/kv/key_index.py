"""The 64-bit index hash of a primary key, persisted in KV segments (so it must never change).

Full-key hash = ``hash64(compacted key bytes)``. When the bucket key is a strict prefix of the primary key,
the bucket-key hash takes the high 32 bits so all keys of one prefix sort together (prefix lookups).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa  # noqa: F401 - used by the doctest

from fluss_lake.write.bucket_assigner import encode_primary_key_hash

__all__ = ["bigint_key_hashes", "index_hashes", "prefix_ranges"]

_HIGH = np.uint64(0xFFFFFFFF00000000)
_SHIFT = np.uint64(32)
_U = np.uint64
_P1, _P2, _P3, _P4, _P5 = (_U(p) for p in (11400714785074694791, 14029467366897019727, 1609587929392839161,
                                           9650029242287828579, 2870177450012600261))
_VARINT_LIMITS = np.array([1 << (7 * i) for i in range(1, 10)], dtype=np.uint64)  # 2 bytes from 2**7, ...


def _hash(frame: pl.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """hash64 of the compacted encoding of `columns`."""
    if len(columns) == 1:
        column = frame.get_column(columns[0])
        if column.dtype == pl.Int64 and not column.has_nulls():
            return bigint_key_hashes(column.to_numpy())
    return encode_primary_key_hash([frame.get_column(c).to_arrow() for c in columns])


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U(r)) | (x >> _U(64 - r))


def _spread7(x: np.ndarray) -> np.ndarray:
    """The 7-bit groups of the low 56 bits of `x`, one per byte lane (the varint bytes without their high bit)."""
    x = (x & _U(0x000000000FFFFFFF)) | ((x & _U(0x00FFFFFFF0000000)) << _U(4))
    x = (x & _U(0x00003FFF00003FFF)) | ((x & _U(0x0FFFC0000FFFC000)) << _U(2))
    return (x & _U(0x007F007F007F007F)) | ((x & _U(0x3F803F803F803F80)) << _U(1))


def bigint_key_hashes(values: np.ndarray) -> np.ndarray:
    """``hash64`` of the compacted encoding of one BIGINT key column, computed from the values directly.

    Equal, bit for bit, to ``encode_primary_key_hash([values])`` (a 64-bit varint, then XXH64 with seed 0; a
    test checks it), without materializing the key bytes: rows are grouped by varint length (1-10 bytes) and
    each group runs XXH64's fixed sequence of steps for that length on whole words.

    Examples
    --------
    >>> v = np.array([0, 300, -1], dtype=np.int64)
    >>> bool((bigint_key_hashes(v) == encode_primary_key_hash([pa.array(v)])).all())
    True
    """
    v = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    lengths = np.searchsorted(_VARINT_LIMITS, v, side="right") + 1
    out = np.empty(len(v), dtype=np.uint64)
    classes = np.unique(lengths).tolist()
    for length in classes:
        sel = None if len(classes) == 1 else np.flatnonzero(lengths == length)
        x = v if sel is None else v[sel]
        continuation = _U(((1 << (8 * min(length - 1, 8))) - 1) & 0x8080808080808080)  # bytes before the last
        with np.errstate(over="ignore"):
            word = _spread7(x) | continuation  # the first (up to) 8 varint bytes, little-endian
            h = np.full(len(x), _P5 + _U(length), dtype=np.uint64)
            if length >= 8:  # one 8-byte word
                h ^= _rotl(word * _P2, 31) * _P1
                h = _rotl(h, 27) * _P1 + _P4
                tail = range(8, length)
            elif length >= 4:  # one 4-byte word
                h ^= (word & _U(0xFFFFFFFF)) * _P1
                h = _rotl(h, 23) * _P2 + _P3
                tail = range(4, length)
            else:
                tail = range(length)
            for i in tail:  # single bytes
                if i < 8:
                    byte = (word >> _U(8 * i)) & _U(0xFF)
                else:
                    byte = (x >> _U(7 * i)) & _U(0x7F)
                    if i < length - 1:
                        byte |= _U(0x80)
                h ^= byte * _P5
                h = _rotl(h, 11) * _P1
            h ^= h >> _U(33)
            h *= _P2
            h ^= h >> _U(29)
            h *= _P3
            h ^= h >> _U(32)
        if sel is None:
            return h
        out[sel] = h
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
