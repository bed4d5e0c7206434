"""Scalar twins of the vectorized key encoding and hashing, for single-key lookups.

One key through numpy costs tens of microseconds of call overhead; these pure-Python (and XXH64 in C through
the ``xxhash`` package) versions give the same bytes, bucket and index hash in a few. They cover the common
key types and return None for the rest, where callers fall back to the vectorized path. Tests check them
against the vectorized functions.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import polars as pl
import xxhash

from fluss_lake.keys import _hash_kernels  # type: ignore[attr-defined]

__all__ = ["encode_key", "fluss_bucket", "hash64", "index_hash"]

_M32 = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593


def _varint(value: int, bits: int) -> bytes:
    """Unsigned LEB128 of the two's-complement `bits`-wide value."""
    value &= (1 << bits) - 1
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_one(value: Any, dtype: pl.DataType) -> bytes | None:
    """Fluss compacted encoding of one key value, or None if this type is left to the vectorized encoder."""
    if value is None:
        return None
    if dtype == pl.Int64 and type(value) is int:
        return _varint(value, 64)
    if dtype == pl.Int32 and type(value) is int:
        return _varint(value, 32)
    if dtype == pl.String and type(value) is str:
        raw = value.encode()
        return _varint(len(raw), 32) + raw
    if dtype == pl.Binary and type(value) is bytes:
        return _varint(len(value), 32) + value
    if dtype == pl.Int16 and type(value) is int:
        return struct.pack("<h", value)
    if dtype == pl.Int8 and type(value) is int:
        return struct.pack("<b", value)
    if dtype == pl.Boolean and type(value) is bool:
        return b"\x01" if value else b"\x00"
    return None


def encode_key(values: Sequence[Any], dtypes: Sequence[pl.DataType]) -> bytes | None:
    """Compacted key bytes of one row's key columns (None: use the vectorized encoder)."""
    parts = []
    for value, dtype in zip(values, dtypes, strict=True):
        part = _encode_one(value, dtype)
        if part is None:
            return None
        parts.append(part)
    return b"".join(parts)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k: int) -> int:
    return (_rotl((k * _C1) & _M32, 15) * _C2) & _M32


def _mix_h1(h: int, k: int) -> int:
    return (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _M32


def _fmix(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def fluss_bucket(key: bytes, num_buckets: int) -> int:
    """Fluss's default bucket of encoded key bytes (Flink murmur, then ``MathUtils.murmurHash``, abs, mod), in
    one compiled call."""
    bucket: int = _hash_kernels.fluss_bucket_one(key, num_buckets)
    return bucket


def _fluss_bucket_py(key: bytes, num_buckets: int) -> int:
    """:func:`fluss_bucket` in Python: the reference the compiled one is tested against."""
    h = 42
    aligned = len(key) - len(key) % 4
    for i in range(0, aligned, 4):
        h = _mix_h1(h, _mix_k1(int.from_bytes(key[i : i + 4], "little")))
    for byte in key[aligned:]:
        h = _mix_h1(h, _mix_k1((byte - 256 if byte > 127 else byte) & _M32))
    h = _fmix(h ^ len(key))
    h = _fmix(((_rotl(_mix_k1(h), 13) * 5 + 0xE6546B64) & _M32) ^ 4)  # MathUtils.murmurHash
    signed = h - (1 << 32) if h & 0x80000000 else h
    signed = 0 if signed == -(1 << 31) else abs(signed)
    return signed % num_buckets


def hash64(key: bytes) -> int:
    """XXH64 (seed 0) of key bytes: the persisted index hash of the vectorized ``hash64``."""
    return xxhash.xxh64_intdigest(key)


def index_hash(full_key: bytes, prefix_key: bytes | None) -> int:
    """The KV index hash: full-key hash, or prefix hash in the high 32 bits when a prefix index exists."""
    full = hash64(full_key)
    if prefix_key is None:
        return full
    return (hash64(prefix_key) & 0xFFFFFFFF00000000) | (full >> 32)
