"""Vectorized hashes over many variable-length byte strings (Arrow binary data), with no per-row loop.

Every function takes *key bytes*: a ``pa.BinaryArray`` / ``pa.LargeBinaryArray`` (or a string,
fixed-size binary, view or chunked variant), a :class:`ByteStrings` (a values buffer plus ``n + 1``
offsets) or a :class:`ByteRanges` (a buffer plus per-row starts and lengths).

Rows are hashed column-wise, with no per-row Python loop. The body loops over word (or stripe)
positions ``j``: each step reads word ``j`` of a working set of rows in their natural order (a strided
view, without index arrays, when all keys have one length and are evenly spaced); rows that run out of
words set their state aside, and the working set shrinks once most rows are done. The tail (the last
``len % block`` bytes) is then finished per tail class, rows grouped by class, so no step needs a mask.
All arithmetic is unsigned 32- or 64-bit numpy arithmetic, which wraps like Java's ``int``/``long``.

- :func:`murmur3_32` -- textbook MurmurHash3 x86_32 (the Iceberg / Guava hash).
- :func:`fluss_murmur_bucket` -- Fluss's default bucket function (``FlussBucketingFunction``).
- :func:`paimon_bucket` -- Paimon's bucket function over raw bytes (conformance only).
- :func:`iceberg_bucket` -- Iceberg's ``bucket[N]`` over already-encoded single-value bytes.
- :func:`hash64` -- the persisted 64-bit key hash: **XXH64 with seed 0**, bit for bit (see its docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fluss_lake.exceptions import InvalidConfigError, InvalidTableError, NullPrimaryKeyError

__all__ = [
    "ByteStrings",
    "ByteRanges",
    "KeyBytes",
    "murmur3_32",
    "fluss_murmur_bucket",
    "paimon_bucket",
    "iceberg_bucket",
    "hash64",
    "check_num_buckets",
]

_U32 = np.uint32
_U64 = np.uint64
_MASK64 = (1 << 64) - 1

# MurmurHash3 x86_32 constants.
_M_C1 = _U32(0xCC9E2D51)
_M_C2 = _U32(0x1B873593)
_M_N = _U32(0xE6546B64)
_M_F1 = _U32(0x85EBCA6B)
_M_F2 = _U32(0xC2B2AE35)
_FLUSS_SEED = 42  # MurmurHashUtils.DEFAULT_SEED (Fluss and Paimon)

# XXH64 primes.
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261
_X_P1, _X_P2, _X_P3, _X_P4, _X_P5 = (_U64(p) for p in (_P1, _P2, _P3, _P4, _P5))
_X_V1 = _U64((_P1 + _P2) & _MASK64)  # seed 0 + P1 + P2
_X_V4 = _U64((-_P1) & _MASK64)  # seed 0 - P1


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


KeyBytes = pa.Array | pa.ChunkedArray | ByteStrings | ByteRanges


def _buffer_u8(buf: pa.Buffer | None) -> np.ndarray:
    """Zero-copy ``uint8`` view of an Arrow buffer (empty for a missing buffer)."""
    return np.zeros(0, dtype=np.uint8) if buf is None else np.frombuffer(buf, dtype=np.uint8)


def _as_rows(keys: KeyBytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalise key bytes to ``(buffer, starts, lengths)``."""
    if isinstance(keys, ByteRanges):
        values = np.ascontiguousarray(keys.values, dtype=np.uint8)
        return values, np.asarray(keys.starts, dtype=np.int64), np.asarray(keys.lengths, dtype=np.int64)
    if not isinstance(keys, ByteStrings):
        keys = ByteStrings.from_arrow(keys)
    return np.ascontiguousarray(keys.values, dtype=np.uint8), keys.starts(), keys.lengths()


# --------------------------------------------------------------------------- row access

Reader = Callable[[str, int], np.ndarray]  # (dtype, extra byte offset) -> one word per selected row
_NARROW_BELOW = 0.75  # shrink the working set once fewer than this share of its rows still have a unit


class _Rows:
    """The rows being hashed, and word reads at per-row offsets: strided when possible, else gathered."""

    __slots__ = ("buf", "starts", "lengths", "n", "uniform", "stride")

    def __init__(self, buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
        """Pad tiny buffers; note equal lengths and evenly spaced starts (reads without index arrays)."""
        self.buf = buf if buf.size >= 8 else np.concatenate([buf, np.zeros(8 - buf.size, dtype=np.uint8)])
        self.starts, self.lengths, self.n = starts, lengths, int(lengths.size)
        self.uniform = int(lengths.min()) == int(lengths.max())
        self.stride: int | None = None
        if self.uniform and self.n == 1:
            self.stride = 1
        elif self.uniform and (step := int(starts[1] - starts[0])) > 0 and bool(np.all(np.diff(starts) == step)):
            self.stride = step

    def gather(self, pos: np.ndarray, *, clip: bool = False) -> Reader:
        """Unaligned gathers at ``pos + extra``; ``clip`` keeps reads for rows that are too short (results
        discarded) inside the buffer."""
        buf = self.buf

        def gathered(dtype: str, extra: int) -> np.ndarray:
            size = np.dtype(dtype).itemsize
            view = np.ndarray((buf.size - size + 1,), dtype=dtype, buffer=buf, strides=(1,))
            at = pos + extra
            if clip:
                np.minimum(at, buf.size - size, out=at)
            return view[at].astype(np.dtype(dtype).newbyteorder("="), copy=False)

        return gathered

    def reader(self, rel: int) -> Reader:
        """Reads at ``start + rel + extra`` of every row (each must have those bytes)."""
        buf = self.buf
        if self.stride is not None:
            stride, base, n = self.stride, int(self.starts[0]) + rel, self.n

            def strided(dtype: str, extra: int) -> np.ndarray:
                view = np.ndarray((n,), dtype=dtype, buffer=buf, offset=base + extra, strides=(stride,))
                return view.astype(np.dtype(dtype).newbyteorder("="))

            return strided
        return self.gather(self.starts + rel)


def _fold_units(
    rows: _Rows, units: np.ndarray, block: int, state: np.ndarray, absorb: Callable[[np.ndarray, Reader], None]
) -> None:
    """Fold unit ``j`` (bytes ``block*j`` onwards) of every row that has one into ``state[..., row]``.

    Each step runs on a working set of rows in their natural order (sequential reads). A row that has no
    unit ``j`` is finished: its state is set aside before the step and put back at the end, so the step
    itself needs no mask. When fewer than three quarters of the working set go on, it shrinks to them.
    """
    top = int(units.max())
    if rows.uniform:
        for j in range(top):
            absorb(state, rows.reader(block * j))
        return
    sub: np.ndarray | None = None  # working set (None = all rows)
    cur, cur_units, cur_starts = state, units, rows.starts
    finished: list[tuple[np.ndarray, np.ndarray]] = []  # (row indices, their final state)
    for j in range(top):
        going = cur_units > j
        count = int(np.count_nonzero(going))
        if count < _NARROW_BELOW * cur_units.size:
            keep = np.flatnonzero(going)
            if sub is not None:
                state[..., sub] = cur
            sub = keep if sub is None else sub[keep]
            cur, cur_units, cur_starts = state[..., sub], units[sub], rows.starts[sub]
        elif count < cur_units.size:
            done = np.flatnonzero(cur_units == j)
            if done.size:
                finished.append((done if sub is None else sub[done], cur[..., done]))
        if sub is None and count == cur_units.size:
            absorb(cur, rows.reader(block * j))
        else:
            absorb(cur, rows.gather(cur_starts + block * j, clip=count < cur_units.size))
    if sub is not None:
        state[..., sub] = cur
    for idx, value in finished:
        state[..., idx] = value


def _finish_tails(
    rows: _Rows, state: np.ndarray, block: int, finish: Callable[[np.ndarray, Reader, int], None]
) -> None:
    """Run ``finish(state_part, read, tail_length)`` once per tail class (``len % block``), reading from
    each row's first tail byte. Rows are grouped by class (in order inside a class), so each call's rows
    share one sequence of steps and need no mask."""
    if rows.uniform:
        length = int(rows.lengths[0])
        if length % block:
            finish(state, rows.reader(length - length % block), length % block)
        return
    tails = (rows.lengths & (block - 1)).astype(np.uint8 if block <= 256 else np.int64)
    order = np.argsort(tails, kind="stable")
    bounds = np.searchsorted(tails[order], np.arange(block + 1)).tolist()
    first = bounds[1]  # class 0 has no tail
    order = order[first:]
    part = state[..., order]
    at = rows.starts[order] + (rows.lengths[order] & ~(block - 1))
    for c in range(1, block):
        a, b = bounds[c] - first, bounds[c + 1] - first
        if b > a:
            finish(part[..., a:b], rows.gather(at[a:b]), c)
    state[..., order] = part


# --------------------------------------------------------------------------- murmur3 x86_32


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    """Rotate ``uint32`` values left by ``r`` bits, in place."""
    high = x >> _U32(32 - r)
    x <<= _U32(r)
    x |= high
    return x


def _mix_k1(k: np.ndarray) -> np.ndarray:
    """murmur3 ``k1`` mixing, in place."""
    k *= _M_C1
    _rotl32(k, 15)
    k *= _M_C2
    return k


def _mix_h1(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    """murmur3 ``h1`` mixing of a mixed ``k1``, in place."""
    h ^= k
    _rotl32(h, 13)
    h *= _U32(5)
    h += _M_N
    return h


def _fmix32(h: np.ndarray) -> np.ndarray:
    """murmur3 finaliser (avalanche), in place."""
    h ^= h >> _U32(16)
    h *= _M_F1
    h ^= h >> _U32(13)
    h *= _M_F2
    h ^= h >> _U32(16)
    return h


def _murmur3_rows(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: int, *, flink: bool) -> np.ndarray:
    """MurmurHash3 x86_32 of each row; ``flink`` mixes each trailing byte on its own, sign-extended."""
    if lengths.size == 0:
        return np.zeros(0, dtype=_U32)
    rows = _Rows(buf, starts, lengths)
    h = np.full(lengths.size, seed & 0xFFFFFFFF, dtype=_U32)

    def word(hv: np.ndarray, read: Reader) -> None:
        _mix_h1(hv, _mix_k1(read("<u4", 0)))

    _fold_units(rows, lengths >> 2, 4, h, word)

    def tail(hv: np.ndarray, read: Reader, count: int) -> None:
        if flink:  # each trailing byte is its own k1, sign-extended like a Java byte
            for t in range(count):
                _mix_h1(hv, _mix_k1(read("u1", t).view(np.int8).astype(np.int32).view(_U32)))
        else:  # the trailing bytes form one little-endian k1
            k = np.zeros(hv.size, dtype=_U32)
            for t in range(count):
                k |= read("u1", t).astype(_U32) << _U32(8 * t)
            hv ^= _mix_k1(k)

    _finish_tails(rows, h, 4, tail)
    h ^= lengths.astype(_U32)
    return _fmix32(h)


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
    h = _murmur3_rows(buf, starts, lengths, _FLUSS_SEED, flink=True)
    # MathUtils.murmurHash(h): one more round on the 4-byte int, then fmix32.
    _mix_k1(h)
    _rotl32(h, 13)
    h *= _U32(5)
    h += _M_N
    h ^= _U32(4)
    _fmix32(h)
    signed = h.view(np.int32).astype(np.int64)
    np.abs(signed, out=signed)
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


def _rotl64(x: np.ndarray, r: int) -> np.ndarray:
    """Rotate ``uint64`` values left by ``r`` bits, in place."""
    high = x >> _U64(64 - r)
    x <<= _U64(r)
    x |= high
    return x


def _xxh_round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """XXH64 round: ``acc = rotl(acc + lane * P2, 31) * P1``, in place on ``acc``."""
    lane *= _X_P2
    acc += lane
    _rotl64(acc, 31)
    acc *= _X_P1
    return acc


def _xxh64_rows(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """XXH64 (seed 0) of each row of ``buf``."""
    n = lengths.size
    if n == 0:
        return np.zeros(0, dtype=_U64)
    rows = _Rows(buf, starts, lengths)
    h = np.full(n, _X_P5, dtype=_U64)
    if int(lengths.max()) >= 32:  # 32+ bytes: 32-byte stripes into four accumulators, then merged
        acc = np.empty((4, n), dtype=_U64)
        acc[:] = np.array([_X_V1, _X_P2, 0, _X_V4], dtype=_U64)[:, None]

        def stripe(av: np.ndarray, read: Reader) -> None:
            for lane in range(4):
                _xxh_round(av[lane], read("<u8", 8 * lane))

        _fold_units(rows, lengths >> 5, 32, acc, stripe)

        long_rows = None if int(lengths.min()) >= 32 else np.flatnonzero(lengths >= 32)
        av = acc if long_rows is None else acc[:, long_rows]
        hv = _rotl64(av[0].copy(), 1)
        hv += _rotl64(av[1].copy(), 7)
        hv += _rotl64(av[2].copy(), 12)
        hv += _rotl64(av[3].copy(), 18)
        for v in av:
            hv ^= _xxh_round(np.zeros(hv.size, dtype=_U64), v.copy())
            hv *= _X_P1
            hv += _X_P4
        if long_rows is None:
            h = hv
        else:
            h[long_rows] = hv
    h += lengths.astype(_U64)

    def tail(hv: np.ndarray, read: Reader, count: int) -> None:
        for t in range(count >> 3):  # whole 8-byte words
            hv ^= _xxh_round(np.zeros(hv.size, dtype=_U64), read("<u8", 8 * t))
            _rotl64(hv, 27)
            hv *= _X_P1
            hv += _X_P4
        at = count & ~7
        if count & 4:  # one 4-byte word
            k = read("<u4", at).astype(_U64)
            k *= _X_P1
            hv ^= k
            _rotl64(hv, 23)
            hv *= _X_P2
            hv += _X_P3
            at += 4
        for t in range(count & 3):  # single bytes
            k = read("u1", at + t).astype(_U64)
            k *= _X_P5
            hv ^= k
            _rotl64(hv, 11)
            hv *= _X_P1

    _finish_tails(rows, h, 32, tail)
    h ^= h >> _U64(33)
    h *= _X_P2
    h ^= h >> _U64(29)
    h *= _X_P3
    h ^= h >> _U64(32)
    return h


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
