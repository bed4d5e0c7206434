"""The BIGINT fast path of the index hash equals the general encoder + XXH64 bit for bit (the hash is persisted
in KV segments, so it must never change), for every varint length, and the index/prefix hashes built on it too."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_lake.keys.index_hash import bigint_key_hashes, index_hashes
from fluss_lake.keys.bucketing import encode_primary_key_hash

EDGES = [0, 1, -1, 2**63 - 1, -2**63] + [s * (2**b + d) for b in range(7, 64, 7) for d in (-1, 0, 1) for s in (1, -1)
                                         if -2**63 <= s * (2**b + d) < 2**63]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from(EDGES), st.integers(-300, 300)),
                max_size=60))
def test_bigint_hashes_equal_the_general_encoder(values) -> None:
    array = np.array(values, dtype=np.int64)
    assert bigint_key_hashes(array).tolist() == encode_primary_key_hash([pa.array(array)]).tolist()


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
