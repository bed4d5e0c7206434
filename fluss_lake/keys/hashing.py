"""Hashes over many variable-length byte strings (Arrow binary data), with no per-row Python loop.

Every function takes *key bytes*: a ``pa.BinaryArray`` / ``pa.LargeBinaryArray`` (or a string,
fixed-size binary, view or chunked variant), a :class:`ByteStrings` (a values buffer plus ``n + 1``
offsets) or a :class:`ByteRanges` (a buffer plus per-row starts and lengths). The per-row loops are
compiled (``_hash_kernels.pyx``); what is around them (finalisers, bucket arithmetic) is numpy.

- :func:`murmur3_32` -- textbook MurmurHash3 x86_32 (the Iceberg / Guava hash).
- :func:`fluss_murmur_bucket` -- Fluss's default bucket function (``FlussBucketingFunction``).
- :func:`paimon_bucket` -- Paimon's bucket function over raw bytes (conformance only).
- :func:`iceberg_bucket` -- Iceberg's ``bucket[N]`` over already-encoded single-value bytes.
- :func:`hash64` -- the persisted 64-bit key hash: **XXH64 with seed 0**, bit for bit (see its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fluss_lake.exceptions import InvalidConfigError, InvalidTableError, NullPrimaryKeyError
from fluss_lake.keys import _hash_kernels  # type: ignore[attr-defined]

__all__ = [
    "ByteStrings",
    "ByteRanges",
    "KeyBytes",
    "murmur3_32",
    "fluss_murmur_bucket",
    "fluss_varint_bucket",
    "paimon_bucket",
    "iceberg_bucket",
    "hash64",
    "check_num_buckets",
]

_U32 = np.uint32
_U64 = np.uint64

_FLUSS_SEED = 42  # MurmurHashUtils.DEFAULT_SEED (Fluss and Paimon)


@dataclass(frozen=True, slots=True)
class ByteStrings:
    """Many byte strings stored as one ``uint8`` values buffer and ``n + 1`` ``int64`` offsets.

    Row ``i`` is ``values[offsets[i]:offsets[i + 1]]``. Offsets need not start at 0.

    Examples
    --------
    >>> keys = ByteStrings.from_pylist([b"\\x00\\x0a", b"abc"])
    >>> len(keys), keys.lengths().tolist()
    (2, [2, 3])
    """

    values: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_pylist(cls, items: Sequence[bytes]) -> ByteStrings:
        """Build from Python ``bytes`` objects (tests and small inputs)."""
        lengths = np.fromiter((len(b) for b in items), dtype=np.int64, count=len(items))
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.frombuffer(b"".join(items), dtype=np.uint8)
        return cls(values, offsets)

    @classmethod
    def from_arrow(cls, array: pa.Array) -> ByteStrings:
        """View an Arrow binary-like array without copying its bytes; nulls raise ``NullPrimaryKeyError``."""
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if array.null_count:
            raise NullPrimaryKeyError(
                f"the key bytes hold {array.null_count} null(s); a key must not be null: "
                "fill or drop those rows before hashing"
            )
        t = array.type
        if pa.types.is_dictionary(t):
            return cls.from_arrow(array.dictionary_decode())
        if pa.types.is_binary_view(t) or pa.types.is_string_view(t):
            return cls.from_arrow(array.cast(pa.large_binary()))
        n = len(array)
        bufs = array.buffers()
        if pa.types.is_fixed_size_binary(t):
            width = t.byte_width
            values = _buffer_u8(bufs[1])
            offsets = (np.arange(n + 1, dtype=np.int64) + array.offset) * width
            return cls(values, offsets)
        if pa.types.is_binary(t) or pa.types.is_string(t):
            off_dtype: type = np.int32
        elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
            off_dtype = np.int64
        else:
            raise InvalidConfigError(
                f"cannot hash an Arrow array of type {t} as key bytes; pass binary data "
                "(for example the output of encode_compacted_key)"
            )
        if n == 0:
            return cls(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
        offsets = np.frombuffer(bufs[1], dtype=off_dtype)[array.offset : array.offset + n + 1]
        return cls(_buffer_u8(bufs[2]), offsets.astype(np.int64))

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    def starts(self) -> np.ndarray:
        """Start position of each row in ``values`` (``int64``)."""
        return np.asarray(self.offsets[:-1], dtype=np.int64)

    def lengths(self) -> np.ndarray:
        """Byte length of each row (``int64``)."""
        return np.diff(np.asarray(self.offsets, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class ByteRanges:
    """Many byte strings as ranges of one buffer: row ``i`` is ``values[starts[i]:starts[i] + lengths[i]]``.

    Ranges may overlap or leave gaps, so a fixed-width ``(n, w)`` matrix whose rows use only a prefix can be
    hashed in place (``starts = arange(n) * w``) without first packing it into an Arrow array.

    Examples
    --------
    >>> rows = ByteRanges(np.array([1, 0, 2, 3], np.uint8), np.array([0, 2]), np.array([1, 2]))
    >>> hash64(rows).tolist() == hash64(pa.array([bytes([1]), bytes([2, 3])])).tolist()
    True
    """

    values: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return int(self.starts.size)


KeyBytes: TypeAlias = pa.Array | pa.ChunkedArray | ByteStrings | ByteRanges


def _buffer_u8(buf: pa.Buffer | None) -> np.ndarray:
    """Zero-copy ``uint8`` view of an Arrow buffer (empty for a missing buffer)."""
    return np.zeros(0, dtype=np.uint8) if buf is None else np.frombuffer(buf, dtype=np.uint8)


def _as_rows(keys: KeyBytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalise key bytes to ``(buffer, starts, lengths)``."""
    if isinstance(keys, ByteRanges):
        values = np.ascontiguousarray(keys.values, dtype=np.uint8)
        return (
            values,
            np.ascontiguousarray(keys.starts, dtype=np.int64),
            np.ascontiguousarray(keys.lengths, dtype=np.int64),
        )
    if not isinstance(keys, ByteStrings):
        keys = ByteStrings.from_arrow(keys)
    return (
        np.ascontiguousarray(keys.values, dtype=np.uint8),
        np.ascontiguousarray(keys.starts(), dtype=np.int64),
        np.ascontiguousarray(keys.lengths(), dtype=np.int64),
    )


# --------------------------------------------------------------------------- murmur3 x86_32


def _murmur3_rows(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: int, *, flink: bool) -> np.ndarray:
    """MurmurHash3 x86_32 of each row; ``flink`` mixes each trailing byte on its own, sign-extended."""
    out = np.empty(lengths.size, dtype=_U32)
    _hash_kernels.murmur3_rows(buf, starts, lengths, seed & 0xFFFFFFFF, flink, out)
    return out


def check_num_buckets(num_buckets: int) -> int:
    """Validate ``bucket.num`` for a bucket function."""
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)) or not 0 < num_buckets < 2**31:
        raise InvalidConfigError(
            f"bucket.num must be a positive 32-bit int, got {num_buckets!r}; set bucket.num to 1 or more"
        )
    return int(num_buckets)


def murmur3_32(keys: KeyBytes, seed: int = 0) -> npt.NDArray[np.uint32]:
    """Textbook MurmurHash3 x86_32 of each byte string (the hash behind Iceberg's ``bucket[N]``).

    Parameters
    ----------
    keys
        Key bytes, one row per key.
    seed
        32-bit seed (Iceberg uses 0).

    Returns
    -------
    numpy.ndarray
        ``uint32`` hash per row; view it as ``int32`` for Java's signed value.

    Examples
    --------
    >>> murmur3_32(pa.array([b"iceberg"])).tolist()
    [1210000089]
    """
    buf, starts, lengths = _as_rows(keys)
    return _murmur3_rows(buf, starts, lengths, seed, flink=False)


def fluss_murmur_bucket(keys: KeyBytes, num_buckets: int) -> npt.NDArray[np.int32]:
    """Fluss's default bucket of each encoded key (``FlussBucketingFunction``, lake formats none/lance).

    ``h = murmurFlink(key, seed 42)`` (each trailing byte mixed on its own after sign extension), then
    ``MathUtils.murmurHash(h)`` (one more murmur round, ``^= 4``, fmix32, absolute value with
    ``MIN_VALUE -> 0``), then ``% num_buckets``.

    Parameters
    ----------
    keys
        Compacted-key bytes (see ``encode_compacted_key``); no key may be empty.
    num_buckets
        ``bucket.num``, at least 1.

    Returns
    -------
    numpy.ndarray
        ``int32`` bucket id per row, in ``[0, num_buckets)``.

    Raises
    ------
    InvalidTableError
        If a key is empty (a bucket key needs at least one column).

    Examples
    --------
    >>> fluss_murmur_bucket(pa.array([b"\\x00\\x0a", b"\\x01"]), 7).tolist()
    [1, 4]
    """
    n_buckets = check_num_buckets(num_buckets)
    buf, starts, lengths = _as_rows(keys)
    if lengths.size and int(lengths.min()) == 0:
        raise InvalidTableError(
            "an encoded bucket key is empty; Fluss cannot assign a bucket to it: give the table a bucket key "
            "with at least one column"
        )
    return _fluss_bucket_of(_murmur3_rows(buf, starts, lengths, _FLUSS_SEED, flink=True), n_buckets)


def fluss_varint_bucket(values: np.ndarray, num_buckets: int) -> npt.NDArray[np.int32]:
    """:func:`fluss_murmur_bucket` of each value's unsigned LEB128 varint, the compacted key of one BIGINT (``uint64``
    two's complement) or INT (``uint32``) bucket-key column, without encoding the column first: the varints go
    into one fixed-stride buffer that the compiled murmur reads in place.

    Examples
    --------
    >>> v = np.array([0, 300, -1], dtype=np.int64)
    >>> keys = pa.array([bytes([0]), bytes([0xAC, 0x02]), bytes([0xFF] * 9 + [0x01])])
    >>> fluss_varint_bucket(v.view(np.uint64), 7).tolist() == fluss_murmur_bucket(keys, 7).tolist()
    True
    """
    n_buckets = check_num_buckets(num_buckets)
    unsigned = np.ascontiguousarray(values, dtype=np.uint64)
    n = unsigned.size
    matrix = np.empty((n, _VARINT_STRIDE), dtype=np.uint8)
    lengths = np.empty(n, dtype=np.int64)
    _hash_kernels.varint_rows(unsigned, matrix, lengths)
    starts = np.arange(0, n * _VARINT_STRIDE, _VARINT_STRIDE, dtype=np.int64)
    h = _murmur3_rows(matrix.reshape(-1), starts, lengths, _FLUSS_SEED, flink=True)
    return _fluss_bucket_of(h, n_buckets)


_VARINT_STRIDE = 10  # bytes of the longest 64-bit LEB128 varint


def _fluss_bucket_of(h: np.ndarray, n_buckets: int) -> npt.NDArray[np.int32]:
    """Fluss's bucket from the Flink murmur of each key (``uint32``).

    ``MathUtils.murmurHash(h)`` (one more round on the 4-byte int, ``^= 4``, fmix32) is the textbook MurmurHash3
    of the int's 4 little-endian bytes with seed 0, so it is one compiled pass over ``h``'s own buffer.
    """
    n = h.size
    words = np.ascontiguousarray(h, dtype=_U32)
    mixed = _murmur3_rows(
        words.view(np.uint8), np.arange(0, 4 * n, 4, dtype=np.int64), np.full(n, 4, dtype=np.int64), 0, flink=False
    )
    signed = np.abs(mixed.view(np.int32).astype(np.int64))
    signed[signed == 2**31] = 0  # Java: abs(MIN_VALUE) stays negative, Flink maps it to 0
    return (signed % n_buckets).astype(np.int32)


def paimon_bucket(keys: KeyBytes, num_buckets: int) -> npt.NDArray[np.int32]:
    """Paimon's bucket over raw bytes: ``abs(murmurFlink(bytes, seed 42) % N)`` with Java ``int`` semantics.

    Only for the conformance vectors: fluss-lake does not encode Paimon ``BinaryRow`` keys.

    Examples
    --------
    >>> paimon_bucket(pa.array([b"\\x00\\x0a\\x0a\\x0a"]), 12).tolist()
    [11]
    """
    n_buckets = check_num_buckets(num_buckets)
    buf, starts, lengths = _as_rows(keys)
    h = _murmur3_rows(buf, starts, lengths, _FLUSS_SEED, flink=True).view(np.int32).astype(np.int64)
    return np.abs(np.fmod(h, n_buckets)).astype(np.int32)


def iceberg_bucket(keys: KeyBytes, num_buckets: int) -> npt.NDArray[np.int32]:
    """Iceberg's ``bucket[N]`` over single-value key bytes: ``(murmur3_x86_32(bytes, 0) & 0x7fffffff) % N``.

    Examples
    --------
    >>> iceberg_bucket(pa.array([b"\\x00\\x0a"]), 7).tolist()
    [3]
    """
    n_buckets = check_num_buckets(num_buckets)
    h = murmur3_32(keys, 0) & _U32(0x7FFFFFFF)
    return (h % _U32(n_buckets)).astype(np.int32)


# --------------------------------------------------------------------------- XXH64


def _xxh64_rows(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """XXH64 (seed 0) of each row of ``buf``."""
    out = np.empty(lengths.size, dtype=_U64)
    _hash_kernels.xxh64_rows(buf, starts, lengths, out)
    return out


def hash64(keys: KeyBytes) -> npt.NDArray[np.uint64]:
    """Persisted 64-bit hash of each byte string: **XXH64 with seed 0**, bit for bit.

    This is the key hash stored by the primary-key index, so it must never change. The algorithm is the
    published XXH64 (``xxhash.xxh64_intdigest(data, seed=0)``): 32-byte stripes into four accumulators
    for inputs of 32+ bytes (else ``h = P5``), ``h += len``, then the remaining 8-byte words, one 4-byte
    word and single bytes, then the avalanche. Golden-value tests pin it.

    Parameters
    ----------
    keys
        Key bytes, one row per key (empty keys allowed).

    Returns
    -------
    numpy.ndarray
        ``uint64`` hash per row.

    Examples
    --------
    >>> [hex(v) for v in hash64(pa.array([b"", b"abc"])).tolist()]
    ['0xef46db3751d8e999', '0x44bc2cf5ad770999']
    """
    buf, starts, lengths = _as_rows(keys)
    return _xxh64_rows(buf, starts, lengths)
