"""The BIGINT fast path of the index hash equals the general encoder + XXH64 bit for bit (the hash is persisted
in KV segments, so it must never change), for every varint length, and the index/prefix hashes built on it too."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_lake.keys.index_hash import bigint_key_hashes, index_hashes, int_key_hashes
from fluss_lake.keys.bucketing import encode_primary_key_hash

EDGES = [0, 1, -1, 2**63 - 1, -2**63] + [s * (2**b + d) for b in range(7, 64, 7) for d in (-1, 0, 1) for s in (1, -1)
                                         if -2**63 <= s * (2**b + d) < 2**63]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from(EDGES), st.integers(-300, 300)),
                max_size=60))
def test_bigint_hashes_equal_the_general_encoder(values) -> None:
    array = np.array(values, dtype=np.int64)
    assert bigint_key_hashes(array).tolist() == encode_primary_key_hash([pa.array(array)]).tolist()


_VALUES = st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from(EDGES), st.integers(-300, 300))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40).flatmap(lambda n: st.lists(
    st.tuples(st.booleans(), st.lists(_VALUES, min_size=n, max_size=n)), min_size=2, max_size=6)))
def test_integer_key_hashes_equal_the_general_encoder(columns) -> None:
    """Keys of several INT and BIGINT columns, any values and varint lengths, hashed by the one compiled loop,
    equal the compacted key bytes + XXH64 (an INT column wraps the values to 32 bits: every 5-byte varint too)."""
    arrays = [np.array(v, dtype=np.int64).astype(np.int32) if narrow else np.array(v, dtype=np.int64)
              for narrow, v in columns]
    want = encode_primary_key_hash([pa.array(a) for a in arrays]).tolist()
    assert int_key_hashes(arrays).tolist() == want
    frame = pl.DataFrame({f"k{i}": a for i, a in enumerate(arrays)})
    assert index_hashes(frame, list(frame.columns)).tolist() == want


def test_keys_with_nulls_or_other_types_keep_the_general_encoder() -> None:
    """A null in an integer key column is not for the integer loop: the general encoder refuses it as before; a
    string column in the key takes the general encoder too."""
    import pytest

    from fluss_lake.exceptions import NullPrimaryKeyError

    frame = pl.DataFrame({"a": [1, None, 3], "b": pl.Series([4, 5, 6], dtype=pl.Int32), "s": ["x", "y", "z"]})
    with pytest.raises(NullPrimaryKeyError, match="must not be null"):
        index_hashes(frame, ["a", "b"])
    want = encode_primary_key_hash([frame.get_column(c).to_arrow() for c in ("b", "s")]).tolist()
    assert index_hashes(frame, ["b", "s"]).tolist() == want


def test_index_and_prefix_hashes_take_the_fast_path_unchanged() -> None:
    rng = np.random.default_rng(4)
    frame = pl.DataFrame({"a": rng.integers(-2**63, 2**63 - 1, 5000, dtype=np.int64, endpoint=True),
                          "b": rng.integers(0, 1000, 5000)})
    general = encode_primary_key_hash([frame.get_column("a").to_arrow()])
    assert index_hashes(frame, ["a"]).tolist() == general.tolist()
    both = encode_primary_key_hash([frame.get_column("a").to_arrow(), frame.get_column("b").to_arrow()])
    want = (general & np.uint64(0xFFFFFFFF00000000)) | (both >> np.uint64(32))
    assert index_hashes(frame, ["a", "b"], ["a"]).tolist() == want.tolist()
    assert EDGES.count(2**56) == 1 and len(bigint_key_hashes(np.empty(0, dtype=np.int64))) == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from(EDGES), st.integers(-300, 300)),
                max_size=60), st.sampled_from([1, 2, 3, 4, 7, 16, 1000, 2**31 - 1]))
def test_integer_buckets_from_the_values_equal_the_general_encoder(values, num_buckets) -> None:
    """A lookup's buckets of one BIGINT or INT key, hashed from the values, are the write path's (Fluss's) buckets."""
    from fluss_lake.keys.bucketing import assign_buckets
    from fluss_lake.keys.hashing import fluss_varint_bucket

    bigint = np.array(values, dtype=np.int64)
    assert (fluss_varint_bucket(bigint.view(np.uint64), num_buckets).tolist()
            == assign_buckets([pa.array(bigint)], num_buckets).tolist())
    integer = bigint.astype(np.int32)  # wraps: every 32-bit varint length too
    assert (fluss_varint_bucket(integer.view(np.uint32), num_buckets).tolist()
            == assign_buckets([pa.array(integer)], num_buckets).tolist())


def test_buckets_of_takes_the_value_path_only_where_it_applies(tmp_path, monkeypatch) -> None:
    """BIGINT/INT bucket keys of Fluss-bucketed tables hash from the values; other keys, and Iceberg tables, keep
    the general encoder; both give the write path's buckets (rows are found where they were written)."""
    import fluss_lake as fl
    import fluss_lake.keys.bucketing as bucketing

    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    fast = []
    real = bucketing.fluss_varint_bucket
    monkeypatch.setattr(bucketing, "fluss_varint_bucket", lambda *a: fast.append(1) or real(*a))
    cases = [("i64", "BIGINT", {}, True), ("i32", "INT", {}, True),
             ("ice", "BIGINT", {"table.datalake.format": "iceberg"}, False), ("s", "STRING", {}, False)]
    for name, kind, options, expect_fast in cases:
        conn.create_table(f"d.{name}", schema={"k": kind, "v": "BIGINT"}, primary_key=["k"], bucket_num=5,
                          options=options)
        table = conn.get_table(f"d.{name}")
        keys = [str(i) for i in range(-50, 50)] if kind == "STRING" else list(range(-50, 50)) + [2**31 - 1]
        table.upsert(pl.DataFrame({"k": keys, "v": list(range(len(keys)))},
                                  schema={"k": table.schema.polars_schema["k"], "v": pl.Int64}))
        fast.clear()
        frame = pl.DataFrame({"k": keys}, schema={"k": table.schema.polars_schema["k"]})
        buckets = bucketing.buckets_of(table.info, frame)
        assert bool(fast) is expect_fast, name
        monkeypatch.setattr(bucketing, "_fluss_bucketed", lambda info: False)  # the general encoder, for reference
        assert buckets.tolist() == bucketing.buckets_of(table.info, frame).tolist(), name
        monkeypatch.undo()
        monkeypatch.setattr(bucketing, "fluss_varint_bucket", lambda *a: fast.append(1) or real(*a))
        assert table.lookup(frame)["v"].to_list() == list(range(len(keys))), name
