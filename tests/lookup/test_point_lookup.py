"""The single-key lookup path gives exactly what the batched path gives: same key bytes, bucket and index hash
as the vectorized functions, and the same rows (absent keys, deletes, prefix-indexed tables, other key types)."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fluss_lake as fl
from fluss_lake.keys.hashing import fluss_murmur_bucket, hash64
from fluss_lake.keys.key_encoding import encode_compacted_key
from fluss_lake.keys import point_key

KEY_TYPES = [(pl.Int64, pa.int64(), st.integers(-2**63, 2**63 - 1)), (pl.Int32, pa.int32(), st.integers(-2**31, 2**31 - 1)),
             (pl.Int16, pa.int16(), st.integers(-2**15, 2**15 - 1)), (pl.Int8, pa.int8(), st.integers(-128, 127)),
             (pl.String, pa.string(), st.text(max_size=40)), (pl.Binary, pa.binary(), st.binary(max_size=40)),
             (pl.Boolean, pa.bool_(), st.booleans())]


@st.composite
def keys(draw):
    chosen = draw(st.lists(st.sampled_from(KEY_TYPES), min_size=1, max_size=3))
    return [(pl_type, pa_type, draw(strategy)) for pl_type, pa_type, strategy in chosen]


@settings(max_examples=300, deadline=None)
@given(keys(), st.integers(1, 64))
def test_scalar_key_functions_equal_vectorized(key, buckets) -> None:
    encoded = point_key.encode_key([v for _, _, v in key], [t for t, _, _ in key])
    vectorized = encode_compacted_key([pa.array([v], type=a) for _, a, v in key])[0].as_py()
    assert encoded == vectorized
    array = pa.array([encoded], type=pa.binary())
    if encoded:
        assert point_key.fluss_bucket(encoded, buckets) == int(fluss_murmur_bucket(array, buckets)[0])
    assert point_key.hash64(encoded) == int(hash64(array)[0])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64), st.integers(1, 2**31 - 1))
def test_compiled_bucket_of_one_key_equals_the_python_reference(key, buckets) -> None:
    # every tail length (0-3 trailing bytes, sign-extended when >= 0x80), the empty key, any bucket count
    assert point_key.fluss_bucket(key, buckets) == point_key._fluss_bucket_py(key, buckets)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.sampled_from(["a", "b", "ü"])), min_size=1, max_size=50),
       st.sampled_from(["full", "prefix", "date"]))
def test_lookup_one_equals_batched_lookup(tmp_path_factory, ops, layout) -> None:
    conn = fl.connect(tmp_path_factory.mktemp("p"))
    conn.create_database("d")
    if layout == "date":  # a key type the scalar path leaves to the vectorized one
        conn.create_table("d.t", schema={"k": "DATE", "s": "STRING", "v": "INT"}, primary_key=["k", "s"], bucket_num=3)
        to_key = lambda k, s: {"k": dt.date(2024, 1, 1) + dt.timedelta(days=k), "s": s}
    else:
        conn.create_table("d.t", schema={"k": "BIGINT", "s": "STRING", "v": "INT"}, primary_key=["k", "s"], bucket_num=3,
                          bucket_keys=["k"] if layout == "prefix" else None)
        to_key = lambda k, s: {"k": k, "s": s}
    table = conn.get_table("d.t")
    for step, (is_delete, k, s) in enumerate(ops):
        if is_delete:
            table.delete([to_key(k, s)])
        else:
            table.upsert([{**to_key(k, s), "v": step}])
    lookuper = table.new_lookup()
    for k in range(0, 41, 3):
        for s in ("a", "ü", "zz"):
            key = to_key(k, s)
            row = lookuper.lookup([key], with_found=True).row(0, named=True)
            expected = {c: row[c] for c in ("k", "s", "v")} if row["_found"] else None
            assert lookuper.lookup_one(key) == expected
