# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled loops of key encoding and hashing: MurmurHash3 x86_32 and XXH64 over many byte strings (one buffer, a
start and a length per row), XXH64 of BIGINT keys straight from their values, and the varint and row-assembly
steps of the compacted key encoding. One pass per row in C instead of numpy passes per word position; see
:mod:`hashing` and :mod:`key_encoding` for the algorithms, their variants and the golden values that pin them."""

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef uint32_t C1 = 0xCC9E2D51
cdef uint32_t C2 = 0x1B873593
cdef uint32_t N = 0xE6546B64
cdef uint32_t F1 = 0x85EBCA6B
cdef uint32_t F2 = 0xC2B2AE35
cdef uint64_t P1 = 11400714785074694791ULL
cdef uint64_t P2 = 14029467366897019727ULL
cdef uint64_t P3 = 1609587929392839161ULL
cdef uint64_t P4 = 9650029242287828579ULL
cdef uint64_t P5 = 2870177450012600261ULL


cdef inline uint32_t rotl32(uint32_t x, int r) noexcept nogil:
    return (x << r) | (x >> (32 - r))


cdef inline uint64_t rotl64(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef inline uint32_t mix_k1(uint32_t k) noexcept nogil:
    return rotl32(k * C1, 15) * C2


cdef inline uint32_t mix_h1(uint32_t h, uint32_t k) noexcept nogil:
    return rotl32(h ^ k, 13) * 5 + N


def murmur3_rows(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths, uint32_t seed,
                 bint flink, uint32_t[::1] out):
    """MurmurHash3 x86_32 of each row; ``flink`` mixes each trailing byte on its own, sign-extended (Flink's
    and Fluss's variant), else the trailing bytes form one little-endian word (the textbook hash)."""
    cdef Py_ssize_t i, j, n = lengths.shape[0]
    cdef int64_t start, length, words, t
    cdef uint32_t h, k
    cdef const uint8_t* p
    with nogil:
        for i in range(n):
            start = starts[i]
            length = lengths[i]
            p = &buf[0] + start if length else NULL
            h = seed
            words = length >> 2
            for j in range(words):
                memcpy(&k, p + 4 * j, 4)
                h = mix_h1(h, mix_k1(k))
            if flink:
                for t in range(words * 4, length):
                    h = mix_h1(h, mix_k1(<uint32_t><int32_t>(<int8_t>p[t])))
            elif length & 3:
                k = 0
                for t in range(length & 3):
                    k |= (<uint32_t>p[words * 4 + t]) << (8 * t)
                h ^= mix_k1(k)
            h ^= <uint32_t>length
            h ^= h >> 16
            h *= F1
            h ^= h >> 13
            h *= F2
            h ^= h >> 16
            out[i] = h


cdef inline uint32_t fmix32(uint32_t h) noexcept nogil:
    h ^= h >> 16
    h *= F1
    h ^= h >> 13
    h *= F2
    return h ^ (h >> 16)


def fluss_bucket_one(bytes key, int32_t num_buckets):
    """Fluss's bucket of one key's encoded bytes: Flink's murmur (seed 42, trailing bytes mixed one by one,
    sign-extended), then ``MathUtils.murmurHash`` of that, its absolute value (0 for the minimum), modulo
    `num_buckets` (the scalar twin of ``murmur3_rows`` followed by the bucket step, for single-key lookups)."""
    cdef const uint8_t* p = <const uint8_t*> key
    cdef Py_ssize_t length = len(key), words = length >> 2, j
    cdef uint32_t h = 42, k
    cdef int64_t signed
    for j in range(words):
        memcpy(&k, p + 4 * j, 4)
        h = mix_h1(h, mix_k1(k))
    for j in range(words * 4, length):
        h = mix_h1(h, mix_k1(<uint32_t><int32_t>(<int8_t>p[j])))
    h = fmix32(h ^ <uint32_t>length)
    h = fmix32((rotl32(mix_k1(h), 13) * 5 + N) ^ 4)
    signed = <int32_t>h
    if signed == -2147483648:
        signed = 0
    elif signed < 0:
        signed = -signed
    return signed % num_buckets


cdef inline uint64_t xxh_round(uint64_t acc, uint64_t lane) noexcept nogil:
    return rotl64(acc + lane * P2, 31) * P1


cdef inline uint64_t xxh_merge(uint64_t h, uint64_t acc) noexcept nogil:
    return (h ^ xxh_round(0, acc)) * P1 + P4


cdef uint64_t xxh64(const uint8_t* p, int64_t length) noexcept nogil:
    """XXH64 (seed 0) of ``length`` bytes at ``p``."""
    cdef int64_t at = 0
    cdef uint64_t h, v1, v2, v3, v4, word
    cdef uint32_t half
    if length >= 32:
        v1 = P1 + P2
        v2 = P2
        v3 = 0
        v4 = 0 - P1
        while at + 32 <= length:
            memcpy(&word, p + at, 8)
            v1 = xxh_round(v1, word)
            memcpy(&word, p + at + 8, 8)
            v2 = xxh_round(v2, word)
            memcpy(&word, p + at + 16, 8)
            v3 = xxh_round(v3, word)
            memcpy(&word, p + at + 24, 8)
            v4 = xxh_round(v4, word)
            at += 32
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18)
        h = xxh_merge(h, v1)
        h = xxh_merge(h, v2)
        h = xxh_merge(h, v3)
        h = xxh_merge(h, v4)
    else:
        h = P5
    h += <uint64_t>length
    while at + 8 <= length:
        memcpy(&word, p + at, 8)
        h ^= xxh_round(0, word)
        h = rotl64(h, 27) * P1 + P4
        at += 8
    if at + 4 <= length:
        memcpy(&half, p + at, 4)
        h ^= <uint64_t>half * P1
        h = rotl64(h, 23) * P2 + P3
        at += 4
    while at < length:
        h ^= <uint64_t>p[at] * P5
        h = rotl64(h, 11) * P1
        at += 1
    h ^= h >> 33
    h *= P2
    h ^= h >> 29
    h *= P3
    h ^= h >> 32
    return h


def xxh64_rows(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths, uint64_t[::1] out):
    """XXH64 (seed 0) of each row."""
    cdef Py_ssize_t i, n = lengths.shape[0]
    with nogil:
        for i in range(n):
            out[i] = xxh64(&buf[0] + starts[i] if lengths[i] else NULL, lengths[i])


cdef inline int varint(uint64_t v, uint8_t* out) noexcept nogil:
    """Write ``v`` as an unsigned LEB128 varint at ``out``; returns its length (1-10 bytes)."""
    cdef int length = 0
    while v >= 0x80:
        out[length] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        length += 1
    out[length] = <uint8_t>v
    return length + 1


def bigint_hashes(const uint64_t[::1] values, uint64_t[::1] out):
    """XXH64 of each value's unsigned LEB128 varint (the compacted encoding of a BIGINT key), without
    building the key bytes of the whole column."""
    cdef Py_ssize_t i, n = values.shape[0]
    cdef uint8_t buf[16]
    with nogil:
        for i in range(n):
            out[i] = xxh64(buf, varint(values[i], buf))


def int_key_hashes(const uint64_t[:, ::1] columns, uint64_t[::1] out):
    """XXH64 of each row's key made of integer columns (``columns[c, i]``: the unsigned two's complement of
    row ``i``'s value in key column ``c``, INT widened from 32 bits): their LEB128 varints one after the other,
    the compacted encoding of such a key, without building the key bytes of the whole batch."""
    cdef Py_ssize_t i, c, k = columns.shape[0], n = columns.shape[1]
    cdef int length
    cdef uint8_t buf[256]
    if k > 25:
        raise ValueError("int_key_hashes: at most 25 key columns")
    with nogil:
        for i in range(n):
            length = 0
            for c in range(k):
                length += varint(columns[c, i], &buf[length])
            out[i] = xxh64(buf, length)


def append_rows(const uint8_t[::1] pool, const int64_t[::1] starts, const int64_t[::1] lengths,
                int64_t[::1] cursor, uint8_t[::1] out):
    """Append ``pool[starts[i]:starts[i] + lengths[i]]`` to row ``i`` of ``out`` at ``cursor[i]`` (advanced):
    building many keys from their parts, one part (column) at a time."""
    cdef Py_ssize_t i, n = lengths.shape[0]
    cdef int64_t length
    with nogil:
        for i in range(n):
            length = lengths[i]
            if length:
                memcpy(&out[cursor[i]], &pool[starts[i]], length)
                cursor[i] += length


def varint_rows(const uint64_t[::1] values, uint8_t[:, ::1] matrix, int64_t[::1] lengths):
    """Unsigned LEB128 of each value into its matrix row (as wide as the longest); ``lengths`` = bytes used."""
    cdef Py_ssize_t i, n = values.shape[0]
    with nogil:
        for i in range(n):
            lengths[i] = varint(values[i], &matrix[i, 0])
