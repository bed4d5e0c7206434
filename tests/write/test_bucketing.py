"""Bucketing, key encodings and key hashes: conformance vectors, spec values, golden values, and hypothesis
checks of the vectorized code against tiny scalar reference implementations written here."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluss_lake.keys.hashing import (
    ByteStrings,
    fluss_murmur_bucket,
    hash64,
    iceberg_bucket,
    murmur3_32,
    paimon_bucket,
)
from fluss_lake.keys.key_encoding import encode_compacted_key, encode_iceberg_key
from fluss_lake.exceptions import InvalidConfigError, InvalidTableError, NullPrimaryKeyError
from fluss_lake.keys.bucketing import BucketingFunction, assign_buckets, encode_primary_key_hash

VECTORS = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "fluss-vectors.jsonl"

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
HYPOTHESIS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# =========================================================================== scalar reference implementations


def rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


def mix_k1(k: int) -> int:
    k = (k * 0xCC9E2D51) & M32
    return (rotl32(k, 15) * 0x1B873593) & M32


def mix_h1(h: int, k: int) -> int:
    return (rotl32(h ^ k, 13) * 5 + 0xE6546B64) & M32


def fmix32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def ref_murmur3(data: bytes, seed: int, *, flink: bool) -> int:
    """murmur3 x86_32; ``flink`` = each trailing byte mixed alone after sign extension."""
    h = seed & M32
    aligned = len(data) // 4 * 4
    for i in range(0, aligned, 4):
        h = mix_h1(h, mix_k1(int.from_bytes(data[i : i + 4], "little")))
    tail = data[aligned:]
    if flink:
        for b in tail:
            h = mix_h1(h, mix_k1((b - 256 if b >= 128 else b) & M32))
    elif tail:
        h ^= mix_k1(int.from_bytes(tail, "little"))
    return fmix32(h ^ (len(data) & M32))


def to_i32(x: int) -> int:
    return x - (1 << 32) if x >= 1 << 31 else x


def ref_fluss_bucket(data: bytes, n: int) -> int:
    code = mix_k1(ref_murmur3(data, 42, flink=True))
    code = (rotl32(code, 13) * 5 + 0xE6546B64) & M32
    code = to_i32(fmix32(code ^ 4))
    code = code if code >= 0 else (-code if code != -(1 << 31) else 0)
    return code % n


def ref_paimon_bucket(data: bytes, n: int) -> int:
    h = to_i32(ref_murmur3(data, 42, flink=True))
    return abs(h) % n  # == Math.abs(h % n) with Java's truncating remainder


def ref_iceberg_bucket(data: bytes, n: int) -> int:
    return (ref_murmur3(data, 0, flink=False) & 0x7FFFFFFF) % n


P1, P2, P3, P4, P5 = (
    11400714785074694791,
    14029467366897019727,
    1609587929392839161,
    9650029242287828579,
    2870177450012600261,
)


def rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def xxh_round(acc: int, lane: int) -> int:
    return (rotl64((acc + lane * P2) & M64, 31) * P1) & M64


def ref_xxh64(data: bytes) -> int:
    """XXH64, seed 0, straight from the spec."""
    n, p = len(data), 0
    if n >= 32:
        v = [(P1 + P2) & M64, P2, 0, (-P1) & M64]
        while p + 32 <= n:
            for i in range(4):
                v[i] = xxh_round(v[i], int.from_bytes(data[p + 8 * i : p + 8 * i + 8], "little"))
            p += 32
        h = (rotl64(v[0], 1) + rotl64(v[1], 7) + rotl64(v[2], 12) + rotl64(v[3], 18)) & M64
        for x in v:
            h = ((h ^ xxh_round(0, x)) * P1 + P4) & M64
    else:
        h = P5
    h = (h + n) & M64
    while p + 8 <= n:
        h ^= xxh_round(0, int.from_bytes(data[p : p + 8], "little"))
        h = (rotl64(h, 27) * P1 + P4) & M64
        p += 8
    if p + 4 <= n:
        h ^= (int.from_bytes(data[p : p + 4], "little") * P1) & M64
        h = (rotl64(h, 23) * P2 + P3) & M64
        p += 4
    while p < n:
        h ^= (data[p] * P5) & M64
        h = (rotl64(h, 11) * P1) & M64
        p += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


def varint(u: int) -> bytes:
    out = bytearray()
    while u & ~0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def java_bytes(u: int) -> bytes:
    """BigInteger.toByteArray: minimal big-endian two's complement."""
    bits = u.bit_length() if u >= 0 else (~u).bit_length()
    return u.to_bytes(bits // 8 + 1, "big", signed=True)


# =========================================================================== key column kinds

UNIT_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def to_unit(v: int, unit: str, per_second: int) -> int:
    have = UNIT_PER_SECOND[unit]
    return v * (per_second // have) if have <= per_second else v // (have // per_second)


@dataclass(frozen=True)
class Kind:
    """A key column type: how to draw raw values, build the Arrow array, and encode one value by hand."""

    name: str
    type: pa.DataType
    values: st.SearchStrategy[Any]
    compacted: Callable[[Any], bytes]
    iceberg: Callable[[Any], bytes] | None  # None: not an Iceberg bucket key type

    def array(self, raw: list[Any]) -> pa.Array:
        t = self.type
        if pa.types.is_decimal(t):
            data = b"".join(u.to_bytes(16, "little", signed=True) for u in raw)
            return pa.Array.from_buffers(pa.decimal128(t.precision, t.scale), len(raw), [None, pa.py_buffer(data)])
        if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_date64(t):
            return pa.array(raw, pa.int64()).cast(t)
        if pa.types.is_date32(t) or pa.types.is_time32(t):
            return pa.array(raw, pa.int32()).cast(t)
        return pa.array(raw, t)


def i64(lo: int = -(2**63), hi: int = 2**63 - 1) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


def le64(v: int) -> bytes:
    return struct.pack("<q", v)


def timestamp_kind(unit: str, tz: str | None = None) -> Kind:
    def compacted(v: int) -> bytes:
        if unit in ("s", "ms"):
            return varint(to_unit(v, unit, 1_000) & M64)
        nanos = to_unit(v, unit, 1_000_000_000)
        millis = nanos // 1_000_000
        return varint(millis & M64) + varint(nanos - millis * 1_000_000)

    bound = 2**62 // UNIT_PER_SECOND["ns"] * UNIT_PER_SECOND[unit] // 1_000  # no overflow to nanos/millis
    return Kind(
        f"timestamp_{unit}{'_tz' if tz else ''}",
        pa.timestamp(unit, tz=tz),
        i64(-bound, bound),
        compacted,
        None if tz else (lambda v: le64(to_unit(v, unit, 1_000_000))),
    )


def time_kind(unit: str) -> Kind:
    per_day = 86_400 * UNIT_PER_SECOND[unit]
    t = pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)

    def millis(v: int) -> int:
        return to_unit(v, unit, 1_000)

    return Kind(
        f"time_{unit}", t, st.integers(0, per_day - 1), lambda v: varint(millis(v)), lambda v: le64(millis(v) * 1000)
    )


def decimal_kind(precision: int, scale: int) -> Kind:
    top = 10**precision - 1

    def compacted(u: int) -> bytes:
        if precision <= 18:
            return varint(u & M64)
        b = java_bytes(u)
        return varint(len(b)) + b

    t = pa.decimal128(precision, scale)
    return Kind(f"decimal_{precision}_{scale}", t, st.integers(-top, top), compacted, java_bytes)


def text_bytes(s: str | bytes) -> bytes:
    return s.encode() if isinstance(s, str) else s


TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=80) | st.sampled_from(["", "a", "x" * 300])
BYTES = st.binary(max_size=80) | st.sampled_from([b"", b"\x00", b"\xff" * 200])

KINDS: list[Kind] = [
    Kind("bool", pa.bool_(), st.booleans(), lambda v: bytes([int(v)]), None),
    Kind("int8", pa.int8(), st.integers(-128, 127), lambda v: struct.pack("<b", v), None),
    Kind("int16", pa.int16(), st.integers(-(2**15), 2**15 - 1), lambda v: struct.pack("<h", v), None),
    Kind("int32", pa.int32(), st.integers(-(2**31), 2**31 - 1), lambda v: varint(v & M32), le64),
    Kind("int64", pa.int64(), i64(), lambda v: varint(v & M64), le64),
    Kind(
        "float32",
        pa.float32(),
        st.floats(width=32, allow_nan=False),
        lambda v: struct.pack("<f", v),
        lambda v: struct.pack("<f", v),
    ),
    Kind(
        "float64",
        pa.float64(),
        st.floats(allow_nan=False),
        lambda v: struct.pack("<d", v),
        lambda v: struct.pack("<d", v),
    ),
    Kind("date32", pa.date32(), st.integers(-(2**31), 2**31 - 1), lambda v: varint(v & M32), le64),
    Kind(
        "date64",
        pa.date64(),
        st.integers(-(2**31), 2**31 - 1).map(lambda d: d * 86_400_000),
        lambda v: varint((v // 86_400_000) & M32),
        lambda v: le64(v // 86_400_000),
    ),
    time_kind("s"),
    time_kind("ms"),
    time_kind("us"),
    time_kind("ns"),
    timestamp_kind("s"),
    timestamp_kind("ms"),
    timestamp_kind("us"),
    timestamp_kind("ns"),
    timestamp_kind("us", tz="UTC"),
    decimal_kind(9, 2),
    decimal_kind(18, 4),
    decimal_kind(19, 0),
    decimal_kind(38, 10),
    Kind("string", pa.string(), TEXT, lambda v: varint(len(v.encode())) + v.encode(), text_bytes),
    Kind("large_string", pa.large_string(), TEXT, lambda v: varint(len(v.encode())) + v.encode(), text_bytes),
    Kind("binary", pa.binary(), BYTES, lambda v: varint(len(v)) + v, text_bytes),
    Kind("large_binary", pa.large_binary(), BYTES, lambda v: varint(len(v)) + v, text_bytes),
    Kind("fixed_binary", pa.binary(5), st.binary(min_size=5, max_size=5), lambda v: varint(5) + v, text_bytes),
    Kind("fixed_binary_40", pa.binary(40), st.binary(min_size=40, max_size=40), lambda v: varint(40) + v, text_bytes),
]
ICEBERG_KINDS = [k for k in KINDS if k.iceberg is not None]
KIND_IDS = [k.name for k in KINDS]


Drawn = tuple[list[Kind], list[pa.Array], list[list[Any]]]


@st.composite
def key_columns(draw: st.DrawFn, kinds: list[Kind], max_columns: int = 4) -> Drawn:
    """1..max_columns random key columns of one random length, sometimes sliced or chunked."""
    chosen = draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=max_columns))
    n = draw(st.integers(0, 25))
    arrays, raws = [], []
    for kind in chosen:
        lead = draw(st.integers(0, 2))
        raw = draw(st.lists(kind.values, min_size=n + lead, max_size=n + lead))
        array = kind.array(raw).slice(lead)
        raw = raw[lead:]
        if n > 1 and draw(st.booleans()):
            cut = draw(st.integers(1, n - 1))
            array = pa.chunked_array([array.slice(0, cut), array.slice(cut)])
        arrays.append(array)
        raws.append(raw)
    return chosen, arrays, raws


def ref_compacted(kinds: list[Kind], raws: list[list[Any]]) -> list[bytes]:
    return [b"".join(kind.compacted(col[r]) for kind, col in zip(kinds, raws)) for r in range(len(raws[0]))]


# =========================================================================== conformance vectors


def load_bucketing_vectors() -> list[dict[str, Any]]:
    if not VECTORS.is_file():
        pytest.fail(
            f"conformance vectors not found at {VECTORS}: check out the shared/ folder beside the repository "
            "(the repository and shared/ must be siblings)"
        )
    for line in VECTORS.read_text().splitlines():
        if line.strip():
            case = json.loads(line)
            if case["name"] == "bucketing_function_vectors":
                return case["writes"]
    pytest.fail(f"{VECTORS} has no 'bucketing_function_vectors' case")


def vector_bytes(op: dict[str, Any]) -> bytes:
    return bytes.fromhex(op["key_bytes_hex"]) if "key_bytes_hex" in op else op["key_utf8"].encode()


def test_conformance_bucket_vectors() -> None:
    ops = [op for op in load_bucketing_vectors() if op["op"] == "bucket"]
    assert ops, "no bucket vectors"
    raw_functions = {
        "fluss": fluss_murmur_bucket,
        "lance": fluss_murmur_bucket,
        "paimon": paimon_bucket,
        "iceberg": iceberg_bucket,
    }
    for op in ops:
        keys = pa.array([vector_bytes(op)], pa.binary())
        for fmt, expected in op["expected"].items():
            assert raw_functions[fmt](keys, op["num_buckets"]).tolist() == [expected], (op, fmt)
        # Iceberg buckets a single key column: a BYTES or STRING column yields exactly these bytes.
        column = pa.array([op["key_utf8"]]) if "key_utf8" in op else keys
        got = assign_buckets([column], op["num_buckets"], lake_format="iceberg").tolist()
        assert got == [op["expected"]["iceberg"]], op


def test_conformance_encode_key_vectors() -> None:
    ops = [op for op in load_bucketing_vectors() if op["op"] == "encode_key"]
    assert ops, "no encode_key vectors"
    types = {"INT": pa.int32(), "BIGINT": pa.int64()}
    for op in ops:
        columns = [pa.array([v], types[t]) for t, v in zip(op["types"], op["values"])]
        assert encode_compacted_key(columns).to_pylist() == [bytes.fromhex(op["expected_hex"])], op


# =========================================================================== spec examples


@pytest.mark.parametrize(("n", "bucket"), [(4, 0), (8, 4), (16, 12)])
def test_int_key_one(n: int, bucket: int) -> None:
    assert encode_compacted_key([pa.array([1], pa.int32())]).to_pylist() == [b"\x01"]
    assert assign_buckets([pa.array([1], pa.int32())], n).tolist() == [bucket]
    assert assign_buckets([pa.array([1], pa.int32())], n, lake_format="lance").tolist() == [bucket]


@pytest.mark.parametrize(("n", "bucket"), [(4, 3), (16, 11)])
def test_string_key_a(n: int, bucket: int) -> None:
    assert encode_compacted_key([pa.array(["a"])]).to_pylist() == [b"\x01a"]
    assert assign_buckets([pa.array(["a"])], n).tolist() == [bucket]


def test_int_minus_one_is_five_varint_bytes() -> None:
    assert encode_compacted_key([pa.array([-1], pa.int32())]).to_pylist() == [bytes.fromhex("ffffffff0f")]
    assert encode_compacted_key([pa.array([-1], pa.int64())]).to_pylist() == [bytes.fromhex("ffffffffffffffffff01")]


def test_multi_column_vectors_bucket_like_their_bytes() -> None:
    columns = [pa.array([1, 2], pa.int32()), pa.array([3, 5], pa.int64()), pa.array([2, 6], pa.int32())]
    expected = fluss_murmur_bucket(pa.array([bytes.fromhex("010302"), bytes.fromhex("020506")]), 16)
    assert assign_buckets(columns, 16).tolist() == expected.tolist()


ICEBERG_SPEC_HASHES = [  # Iceberg spec, "Appendix B: 32-bit Hash Requirements"
    (pa.array([34], pa.int32()), 2017239379),
    (pa.array([34], pa.int64()), 2017239379),
    (pa.array(["iceberg"]), 1210000089),
    (pa.array([b"\x00\x01\x02\x03"]), -188683207),
    (pa.array([b"\x00\x01\x02\x03"], pa.binary(4)), -188683207),
    (pa.array([17486], pa.int32()).cast(pa.date32()), -653330422),  # 2017-11-16
    (pa.array([81068000], pa.int32()).cast(pa.time32("ms")), -662762989),  # 22:31:08
    (pa.array([1510871468000000], pa.int64()).cast(pa.timestamp("us")), -2047944441),  # 2017-11-16T22:31:08
    (pa.array([1510871468000001], pa.int64()).cast(pa.timestamp("us")), -1207196810),
]


@pytest.mark.parametrize(("column", "expected"), ICEBERG_SPEC_HASHES)
def test_iceberg_spec_hashes(column: pa.Array, expected: int) -> None:
    h = murmur3_32(encode_iceberg_key(column)).view(np.int32)
    assert h.tolist() == [expected]
    n = 2**31 - 1  # bucket[2^31 - 1] of a hash is the hash's low 31 bits (unless they are all ones)
    assert assign_buckets([column], n, lake_format="iceberg").tolist() == [(expected & 0x7FFFFFFF) % n]


def test_iceberg_spec_decimal() -> None:
    column = pa.Array.from_buffers(pa.decimal128(9, 2), 1, [None, pa.py_buffer((1420).to_bytes(16, "little"))])
    assert encode_iceberg_key(column).to_pylist() == [b"\x05\x8c"]  # 14.20 -> unscaled 1420
    assert murmur3_32(encode_iceberg_key(column)).view(np.int32).tolist() == [-500754589]


# =========================================================================== golden values: hash64 = XXH64 seed 0

HASH64_GOLDEN = [
    (b"", 0xEF46DB3751D8E999),
    (b"a", 0xD24EC4F1A98C6E5B),
    (b"abc", 0x44BC2CF5AD770999),
    (bytes.fromhex("010302"), 0x4C43C0064FB34D99),
    (bytes(range(8)), 0x884A173614B81B8D),
    (bytes(range(12)), 0x424AF23F1F08DCA5),
    (bytes(range(31)), 0xC346D2B59B4D8EE1),
    (bytes(range(32)), 0xCBF59C5116FF32B4),
    (bytes(range(33)), 0x0C535D1ACAFB8EAD),
    (bytes(range(64)), 0xF7C67301DB6713F0),
    (bytes(range(100)), 0x6AC1E58032166597),
    (b"2bb87d68-baf9-4e64-90f9-f80910419fa6", 0x6FED783692E3A53E),
    (b"The quick brown fox jumps over the lazy dog", 0x0B242D361FDA71BC),
]


def test_hash64_golden_values() -> None:
    data = [d for d, _ in HASH64_GOLDEN]
    expected = [h for _, h in HASH64_GOLDEN]
    assert hash64(pa.array(data, pa.binary())).tolist() == expected
    assert hash64(pa.array(data, pa.large_binary())).tolist() == expected
    assert hash64(ByteStrings.from_pylist(data)).tolist() == expected
    assert [ref_xxh64(d) for d in data] == expected
    for d, h in HASH64_GOLDEN:  # one row at a time, and many equal rows (strided access)
        assert hash64(pa.array([d] * 5, pa.binary())).tolist() == [h] * 5


def test_primary_key_hash_golden_values() -> None:
    columns = [pa.array([1, 2], pa.int32()), pa.array([3, 5], pa.int64()), pa.array([2, 6], pa.int32())]
    assert encode_primary_key_hash(columns).tolist()[0] == 0x4C43C0064FB34D99  # xxh64(01 03 02)
    assert encode_primary_key_hash([pa.array(["a"])]).tolist() == [ref_xxh64(b"\x01a")]
    assert encode_primary_key_hash([pa.array([-1], pa.int64())]).tolist() == [ref_xxh64(b"\xff" * 9 + b"\x01")]


# =========================================================================== hypothesis: hashes vs reference

KEY_BYTES = st.lists(st.binary(max_size=80) | st.binary(min_size=60, max_size=300), max_size=40)


@st.composite
def binary_keys(draw: st.DrawFn, *, min_len: int = 0) -> tuple[pa.Array | pa.ChunkedArray, list[bytes]]:
    """Random byte strings as some Arrow binary layout (sliced, large, chunked, equal lengths)."""
    if draw(st.booleans()):
        width = draw(st.integers(max(min_len, 0), 70))
        items = draw(st.lists(st.binary(min_size=width, max_size=width), max_size=40))
    else:
        one = st.binary(min_size=min_len, max_size=80) | st.binary(min_size=60, max_size=300)
        items = draw(st.lists(one, max_size=40))
    lead = draw(st.lists(st.binary(min_size=min_len, max_size=9), max_size=2))
    layout = draw(st.sampled_from(["binary", "large_binary", "chunked"]))
    if layout == "chunked" and len(items) > 1:
        cut = draw(st.integers(1, len(items) - 1))
        return pa.chunked_array([pa.array(items[:cut], pa.binary()), pa.array(items[cut:], pa.binary())]), items
    t = pa.large_binary() if layout == "large_binary" else pa.binary()
    return pa.array(lead + items, t).slice(len(lead)), items


@HYPOTHESIS
@given(binary_keys(), st.integers(0, M32))
def test_hash64_and_murmur3_match_reference(keys: tuple[pa.Array, list[bytes]], seed: int) -> None:
    array, items = keys
    assert hash64(array).tolist() == [ref_xxh64(b) for b in items]
    assert murmur3_32(array, seed).tolist() == [ref_murmur3(b, seed, flink=False) for b in items]
    assert hash64(array).dtype == np.uint64 and murmur3_32(array).dtype == np.uint32


@HYPOTHESIS
@given(binary_keys(min_len=1), st.integers(1, 2**31 - 1) | st.integers(1, 64))
def test_bucket_functions_match_reference(keys: tuple[pa.Array, list[bytes]], n: int) -> None:
    array, items = keys
    fluss = fluss_murmur_bucket(array, n)
    assert fluss.dtype == np.int32
    assert fluss.tolist() == [ref_fluss_bucket(b, n) for b in items]
    assert paimon_bucket(array, n).tolist() == [ref_paimon_bucket(b, n) for b in items]
    assert iceberg_bucket(array, n).tolist() == [ref_iceberg_bucket(b, n) for b in items]


def test_large_mixed_batch_matches_reference() -> None:
    """Thousands of rows of many lengths: every tail class and word count at once."""
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 120, 3000)
    lengths[:200] = 7  # a big class of equal lengths among the others
    items = [rng.integers(0, 256, int(k), dtype=np.uint8).tobytes() for k in lengths]
    keys = pa.array(items, pa.binary())
    assert hash64(keys).tolist() == [ref_xxh64(b) for b in items]
    assert murmur3_32(keys, 0).tolist() == [ref_murmur3(b, 0, flink=False) for b in items]
    nonempty = pa.array([b for b in items if b], pa.binary())
    expected = [ref_fluss_bucket(b, 1000) for b in items if b]
    assert fluss_murmur_bucket(nonempty, 1000).tolist() == expected

    ids = rng.integers(-(2**40), 2**40, 3000)
    words = ["k" * int(k) for k in rng.integers(0, 40, 3000)]
    columns = [pa.array(ids), pa.array(words), pa.array(ids.astype(np.int32))]
    encoded = [
        varint(int(i) & M64) + varint(len(w)) + w.encode() + varint(int(i) & M32)  # astype(int32) keeps the low bits
        for i, w in zip(ids, words)
    ]
    assert encode_compacted_key(columns).to_pylist() == encoded
    assert assign_buckets(columns, 128).tolist() == [ref_fluss_bucket(b, 128) for b in encoded]
    assert encode_primary_key_hash(columns).tolist() == [ref_xxh64(b) for b in encoded]


# =========================================================================== hypothesis: encoders vs reference


@HYPOTHESIS
@given(key_columns(KINDS), st.integers(1, 4096))
def test_compacted_key_bucket_and_hash_match_reference(drawn: Drawn, n: int) -> None:
    kinds, arrays, raws = drawn
    expected = ref_compacted(kinds, raws)
    encoded = encode_compacted_key(arrays)
    assert encoded.type == pa.binary()
    assert encoded.to_pylist() == expected
    assert assign_buckets(arrays, n).tolist() == [ref_fluss_bucket(b, n) for b in expected]
    hashes = encode_primary_key_hash(arrays)
    assert hashes.tolist() == [ref_xxh64(b) for b in expected]
    assert hashes.tolist() == hash64(encoded).tolist()  # the in-place fast path is the same function


@HYPOTHESIS
@given(key_columns(ICEBERG_KINDS, max_columns=1), st.integers(1, 2**31 - 1) | st.integers(1, 64))
def test_iceberg_key_and_bucket_match_reference(drawn: Drawn, n: int) -> None:
    (kind,), (array,), (raw,) = drawn
    expected = [kind.iceberg(v) for v in raw]  # type: ignore[misc]
    assert encode_iceberg_key(array).to_pylist() == expected
    # pyiceberg_core where it applies, our murmur3 elsewhere: both must be Iceberg's bucket[N].
    assert assign_buckets([array], n, lake_format="iceberg").tolist() == [ref_iceberg_bucket(b, n) for b in expected]


def boundary_values(kind: Kind) -> list[Any]:
    """Boundary values of a kind (hypothesis may not draw them all together)."""
    t = kind.type
    if pa.types.is_integer(t) or pa.types.is_date32(t):
        bits = 32 if pa.types.is_date32(t) else t.bit_width
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return [v for v in (lo, -129, -1, 0, 1, 127, 128, 16383, 16384, hi) if lo <= v <= hi]
    if pa.types.is_decimal(t):
        top = 10**t.precision - 1
        return [v for v in (-top, -(2**63), -129, -128, -1, 0, 1, 127, 128, 2**63 - 1, top) if -top <= v <= top]
    if pa.types.is_floating(t):
        return [-0.0, 0.0, float("inf"), float("-inf"), 1.5, -2.25]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ["", "a", "\u00e9", "\U0001f600", "x" * 200]
    if pa.types.is_fixed_size_binary(t):
        return [b"\x00" * t.byte_width, b"\xff" * t.byte_width]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [b"", b"\x00", b"\xff" * 130]
    if pa.types.is_boolean(t):
        return [True, False]
    if pa.types.is_date64(t):
        return [-86_400_000, 0, 86_400_000]
    if pa.types.is_time(t):
        return [0, 1, 999, 1000, 86_400 * UNIT_PER_SECOND[t.unit] - 1]
    return [-(10**12) - 1, -1_000_001, -1_000, -1, 0, 1, 999_999, 10**12 + 7]  # timestamps


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_every_kind_encodes_boundary_values(kind: Kind) -> None:
    raw = boundary_values(kind)
    array = kind.array(raw)
    assert encode_compacted_key([array]).to_pylist() == ref_compacted([kind], [raw])
    assert assign_buckets([array], 97).tolist() == [ref_fluss_bucket(b, 97) for b in ref_compacted([kind], [raw])]
    if kind.iceberg is not None:
        expected = [kind.iceberg(v) for v in raw]
        assert encode_iceberg_key(array).to_pylist() == expected
        buckets = assign_buckets([array], 97, lake_format="iceberg")
        assert buckets.tolist() == [ref_iceberg_bucket(b, 97) for b in expected]


def test_other_decimal_widths_are_cast() -> None:
    column = pa.array([1, -2], pa.int64()).cast(pa.decimal128(20, 0)).cast(pa.decimal256(20, 0))
    assert encode_compacted_key([column]).to_pylist() == [b"\x01\x01", b"\x01\xfe"]
    assert encode_iceberg_key(column).to_pylist() == [b"\x01", b"\xfe"]


def test_views_and_dictionaries_encode_like_plain_strings() -> None:
    plain = pa.array(["x", "", "hello"])
    expected = encode_compacted_key([plain]).to_pylist()
    assert encode_compacted_key([plain.cast(pa.string_view())]).to_pylist() == expected
    assert encode_compacted_key([plain.dictionary_encode()]).to_pylist() == expected
    assert assign_buckets([plain.cast(pa.string_view())], 7, lake_format="iceberg").tolist() == assign_buckets(
        [plain], 7, lake_format="iceberg"
    ).tolist()


# =========================================================================== errors and edge cases


def test_null_key_raises_naming_the_column() -> None:
    columns = [pa.array([1, 2, 3], pa.int32()), pa.array(["a", None, "c"])]
    with pytest.raises(NullPrimaryKeyError, match=r"'name'.*1 null.*row 1.*fill or drop"):
        encode_compacted_key(columns, names=["id", "name"])
    with pytest.raises(NullPrimaryKeyError, match="fill or drop"):
        assign_buckets(columns, 4, names=["id", "name"])
    with pytest.raises(NullPrimaryKeyError):
        encode_primary_key_hash(columns)
    with pytest.raises(NullPrimaryKeyError, match="'name'"):
        assign_buckets([columns[1]], 4, lake_format="iceberg", names=["name"])
    with pytest.raises(NullPrimaryKeyError):
        hash64(pa.array([b"a", None]))


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1], pa.int8()),
        pa.array([1], pa.int16()),
        pa.array([True]),
        pa.array([0], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([[1]]),
    ],
    ids=["int8", "int16", "bool", "timestamp_ltz", "list"],
)
def test_iceberg_rejects_unsupported_key_types(column: pa.Array) -> None:
    with pytest.raises(InvalidConfigError, match=r"'k'.*Iceberg bucket key does not support"):
        encode_iceberg_key(column, name="k")
    with pytest.raises(InvalidConfigError, match="Iceberg bucket key does not support"):
        assign_buckets([column], 4, lake_format="iceberg", names=["k"])


def test_iceberg_needs_exactly_one_column() -> None:
    with pytest.raises(InvalidConfigError, match="exactly one column"):
        assign_buckets([pa.array([1]), pa.array([2])], 4, lake_format="iceberg")


@pytest.mark.parametrize("fmt", ["paimon", "PAIMON", "hudi"])
def test_paimon_bucketing_is_not_supported(fmt: str) -> None:
    with pytest.raises(InvalidConfigError, match="not supported"):
        assign_buckets([pa.array([1])], 4, lake_format=fmt)


def test_unknown_lake_format() -> None:
    with pytest.raises(InvalidConfigError, match="unknown table.datalake.format"):
        BucketingFunction.of("delta")


def test_format_names() -> None:
    assert BucketingFunction.of(None).name == "fluss"
    assert BucketingFunction.of("fluss").name == "fluss"
    assert BucketingFunction.of("lance").name == "fluss"
    assert BucketingFunction.of("Iceberg").name == "iceberg"


@pytest.mark.parametrize("n", [0, -1, 2**31, 1.5, True])
def test_bad_bucket_count(n: Any) -> None:
    with pytest.raises(InvalidConfigError, match="bucket.num"):
        assign_buckets([pa.array([1])], n)
    with pytest.raises(InvalidConfigError, match="bucket.num"):
        assign_buckets([pa.array([1])], n, lake_format="iceberg")


def test_empty_key_bytes_cannot_be_bucketed() -> None:
    with pytest.raises(InvalidTableError, match="empty"):
        fluss_murmur_bucket(pa.array([b"a", b""]), 4)
    with pytest.raises(InvalidTableError, match="at least one column"):
        assign_buckets([], 4)


def test_unsupported_compacted_key_type() -> None:
    with pytest.raises(InvalidTableError, match=r"'u'.*uint32"):
        encode_compacted_key([pa.array([1], pa.uint32())], names=["u"])


def test_zero_rows() -> None:
    for kind in KINDS:
        empty = kind.array([])
        assert len(encode_compacted_key([empty])) == 0
        assert assign_buckets([empty], 4).tolist() == []
        assert encode_primary_key_hash([empty]).tolist() == []
        if kind.iceberg is not None:
            assert assign_buckets([empty], 4, lake_format="iceberg").tolist() == []
    assert hash64(pa.array([], pa.binary())).tolist() == []
