"""The in-RAM segment index (radix directory + 32-bit fingerprints) finds exactly what a binary search over the
hash column finds, for any hash layout (duplicates from collisions, shared high bits from prefix indexes, tiny
and empty segments); lookups through it give the same rows as a model dict, for segments written by flushes
and merges, and for segments opened from a snapshot by another process; and it stays small."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fluss_lake as fl
from fluss_lake.keys import index_hash as key_index
from fluss_lake.kv import _kernels, kv_tablet, segment  # type: ignore[attr-defined]
from fluss_lake.kv.segment import SegmentIndex

U64 = st.integers(0, 2**64 - 1)


@st.composite
def hash_columns(draw):
    """Sorted uint64 columns: uniform, with repeated values (key collisions), or clustered under a few high
    32-bit prefixes (prefix-indexed tables), plus query hashes present, absent and at the extremes."""
    layout = draw(st.sampled_from(["uniform", "duplicates", "prefixes"]))
    size = draw(st.integers(1, 3000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if layout == "uniform":
        column = rng.integers(0, 2**64 - 1, size, dtype=np.uint64, endpoint=True)
    elif layout == "duplicates":
        column = rng.choice(rng.integers(0, 2**64 - 1, max(size // 5, 1), dtype=np.uint64, endpoint=True), size)
    else:
        highs = rng.integers(0, 2**32, draw(st.integers(1, 4)), dtype=np.uint64) << np.uint64(32)
        column = rng.choice(highs, size) | rng.integers(0, 2**32, size, dtype=np.uint64)
    column = np.sort(column)
    extra = np.array(draw(st.lists(U64, max_size=20)), dtype=np.uint64)
    queries = np.concatenate([rng.choice(column, min(size, 200)), column[:1] - np.uint64(1), column[-1:] + np.uint64(1),
                              extra, np.array([0, 2**64 - 1], dtype=np.uint64),
                              rng.integers(0, 2**64 - 1, 100, dtype=np.uint64, endpoint=True)])
    return column, queries


def _expected_rows(column: np.ndarray, queries: np.ndarray) -> list[int]:
    """The first row holding each query hash (binary search), or -1."""
    want = column.searchsorted(queries)
    return [int(p) if p < len(column) and column[p] == q else -1 for p, q in zip(want, queries)]


@settings(max_examples=200, deadline=None)
@given(hash_columns(), st.integers(0, 2**32 - 1))
def test_probe_finds_exactly_what_a_binary_search_finds(case, seed) -> None:
    column, queries = case
    expected = _expected_rows(column, queries)
    order = np.random.default_rng(seed).permutation(len(queries))  # any visiting order gives the same result
    index = SegmentIndex.build(column)
    for probe in (lambda *a: index.probe(column, *a), lambda *a: _kernels.probe_sorted(column, *a)):
        seg_of, row_of = np.full(len(queries), -1, dtype=np.int64), np.zeros(len(queries), dtype=np.int64)
        seg_of[:3] = 9  # already found in a newer segment: not pending
        pending = order[order >= 3]
        missing = probe(queries, pending, seg_of, row_of, 4)
        assert seg_of[:3].tolist() == [9] * min(3, len(queries))
        got = [int(r) if s == 4 else -1 for s, r in zip(seg_of[3:], row_of[3:])]
        assert got == expected[3:]
        assert pending[:missing].tolist() == [i for i in order.tolist() if i >= 3 and expected[i] < 0]
    view = memoryview(column)
    import bisect

    for q, p in zip(queries.tolist()[:60], column.searchsorted(queries).tolist()[:60]):  # the scalar path of lookup_one
        lo, hi = index.bounds(q)
        assert bisect.bisect_left(view, q, lo, hi) == p


def test_index_of_an_empty_column_and_its_size() -> None:
    empty = SegmentIndex.build(np.empty(0, dtype=np.uint64))
    assert empty.rows == 0 and empty.bounds(2**63) == (0, 0)
    column = np.sort(np.random.default_rng(3).integers(0, 2**64 - 1, 200_000, dtype=np.uint64, endpoint=True))
    index = SegmentIndex.build(column)
    assert index.nbytes <= 8 * len(column) + 4096, "directory (<= 4 B/row) + fingerprints (4 B/row)"
    assert int(np.diff(index.starts).max()) <= 16, "a directory slot holds a handful of rows: a probe scans a few"


@pytest.fixture
def always_indexed(monkeypatch):
    """Index every file segment, however small (the default skips segments under 2,048 rows)."""
    monkeypatch.setattr(segment, "_INDEX_MIN_ROWS", 1)


def _table(path, **create) -> fl.Table:
    conn = fl.connect(path)
    conn.create_database("d", ignore_if_exists=True)
    conn.create_table("d.t", schema={"id": "BIGINT", "v": "STRING", "n": "INT", "x": "DOUBLE"}, primary_key=["id"],
                      **create)
    return conn.get_table("d.t")


def _check(table: fl.Table, expected: dict[int, tuple[str, int, float]], probe: list[int]) -> None:
    looked = table.new_lookup().lookup(pl.DataFrame({"id": probe}), with_found=True)
    assert looked.get_column("id").to_list() == probe
    assert looked.get_column("_found").to_list() == [k in expected for k in probe]
    assert looked.select("v", "n", "x").rows() == [expected.get(k, (None, None, None)) for k in probe]
    one = table.new_lookup()
    for k in probe[:40]:
        row = one.lookup_one({"id": k})
        assert row == ({"id": k, "v": expected[k][0], "n": expected[k][1], "x": expected[k][2]}
                       if k in expected else None)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 400), min_size=1, max_size=40)), min_size=1,
                max_size=25), st.sampled_from([1, 3]))
def test_indexed_lookups_equal_a_model(always_indexed, tmp_path_factory, batches, buckets) -> None:
    table = _table(tmp_path_factory.mktemp("ix"), bucket_num=buckets)
    expected: dict[int, tuple[str, int, float]] = {}
    for step, (is_delete, keys) in enumerate(batches):
        if is_delete:
            table.delete(pl.DataFrame({"id": keys}))
            for k in keys:
                expected.pop(k, None)
        else:
            unique = list(dict.fromkeys(keys))
            table.upsert(pl.DataFrame({"id": unique, "v": [f"s{step}-{k}" for k in unique],
                                       "n": [step] * len(unique), "x": [k / 2 for k in unique]},
                                      schema={"id": pl.Int64, "v": pl.String, "n": pl.Int32, "x": pl.Float64}))
            expected.update({k: (f"s{step}-{k}", step, k / 2) for k in unique})
        if step % 4 == 3:
            table.snapshot()  # memtable -> file segments, merged when a tier fills
    table.snapshot()
    files = [s for b in range(buckets) for s in table._tablets().kv_tablet(b).kv.segments if s.on_disk and s.rows]
    assert all(s.index() is not None for s in files)
    _check(table, expected, list(range(0, 420, 3)) + list(range(400, -1, -7)))
    table.compact()
    _check(table, expected, list(range(0, 420, 5)))


def test_indexed_lookups_resolve_hash_collisions(always_indexed, monkeypatch, tmp_path) -> None:
    """Every key hashes to one of 8 values: directory slots hold long runs of equal hashes."""
    real = key_index.index_hashes

    def weak(frame, primary_key, prefix_key=()):
        return real(frame, primary_key, prefix_key) % np.uint64(8)

    from fluss_lake.lookup import lookuper
    for module in (key_index, kv_tablet, lookuper):
        monkeypatch.setattr(module, "index_hashes", weak)
    table = _table(tmp_path)
    expected = {}
    for step in range(6):
        keys = list(range(step * 40, step * 40 + 120))
        table.upsert(pl.DataFrame({"id": keys, "v": [f"s{step}"] * 120, "n": [step] * 120, "x": [0.5] * 120},
                                  schema={"id": pl.Int64, "v": pl.String, "n": pl.Int32, "x": pl.Float64}))
        expected.update({k: (f"s{step}", step, 0.5) for k in keys})
        table.delete(pl.DataFrame({"id": [step * 13]}))
        expected.pop(step * 13, None)
        table.snapshot()
    looked = table.new_lookup().lookup(pl.DataFrame({"id": list(range(400))}), with_found=True)
    assert looked.get_column("_found").to_list() == [k in expected for k in range(400)]
    assert looked.get_column("n").to_list() == [expected[k][1] if k in expected else None for k in range(400)]


def test_fully_deleted_state_leaves_empty_segments_that_lookups_skip(always_indexed, tmp_path) -> None:
    table = _table(tmp_path)
    table.upsert(pl.DataFrame({"id": [1, 2, 3], "v": ["a", "b", "c"], "n": [1, 2, 3], "x": [0.0, 1.0, 2.0]},
                              schema={"id": pl.Int64, "v": pl.String, "n": pl.Int32, "x": pl.Float64}))
    table.snapshot()
    table.delete(pl.DataFrame({"id": [1, 2, 3]}))
    table.compact()
    assert all(s.rows == 0 for s in table._tablets().kv_tablet(0).kv.segments)
    _check(table, {}, [1, 2, 3, 4])


CHILD = """
import json, sys
import polars as pl
import fluss_lake as fl
args = json.loads(sys.argv[1])
table = fl.connect(args["path"]).get_table("d.t")
kv = table._tablets().kv_tablet(0).kv
looked = table.new_lookup().lookup(pl.DataFrame({"id": args["probe"]}), with_found=True)
ones = [table.new_lookup().lookup_one({"id": k}) for k in args["probe"][:50]]
print(json.dumps({"rows": looked.select("id", "v", "n", "x", "_found").rows(), "ones": ones,
                  "indexed": sum(s.index() is not None for s in kv.segments),
                  "segments": [s.rows for s in kv.segments]}))
"""


def test_segments_opened_from_a_snapshot_in_a_new_process(tmp_path) -> None:
    """Real sizes (over the 2,048-row threshold): segments from flushes and merges, indexed by a fresh process."""
    table = _table(tmp_path, bucket_num=1)
    rng = np.random.default_rng(8)
    expected: dict[int, tuple[str, int, float]] = {}
    for step in range(5):
        keys = np.unique(rng.integers(0, 120_000, 30_000))
        table.upsert(pl.DataFrame({"id": keys, "v": [f"{step}:{k}" for k in keys.tolist()],
                                   "n": np.full(len(keys), step, dtype=np.int32), "x": keys * 0.25}))
        expected.update({k: (f"{step}:{k}", step, k * 0.25) for k in keys.tolist()})
        table.snapshot()
    gone = rng.integers(0, 120_000, 500)
    table.delete(pl.DataFrame({"id": gone}))
    for k in gone.tolist():
        expected.pop(k, None)
    table.snapshot()
    probe = rng.integers(0, 125_000, 3000).tolist()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps({"path": str(tmp_path), "probe": probe})],
                         capture_output=True, text=True, env=env, timeout=120, check=True)
    child = json.loads(out.stdout)
    assert child["indexed"] >= 1, f"no segment was indexed: {child['segments']}"
    want = [(k, *expected.get(k, (None, None, None)), k in expected) for k in probe]
    assert [tuple(r) for r in child["rows"]] == want
    assert child["ones"] == [{"id": k, "v": expected[k][0], "n": expected[k][1], "x": expected[k][2]}
                             if k in expected else None for k in probe[:50]]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["int64", "int32", "int8", "float64", "string", "large_string", "bool_", "date32"]),
       st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=30), st.booleans(), st.integers(0, 5))
def test_point_readers_read_what_arrow_scalars_read(kind, values, with_null, cut) -> None:
    """lookup_one reads values from the column buffers; they equal ``array[i].as_py()`` for every type."""
    import datetime as dt

    import pyarrow as pa

    from fluss_lake.kv.segment import _point_reader

    convert = {"int64": lambda v: v, "int32": lambda v: v, "int8": lambda v: v % 128, "float64": lambda v: v / 7,
               "string": lambda v: "" if v % 3 == 0 else f"ü{v}", "large_string": lambda v: "" if v % 2 else str(v),
               "bool_": lambda v: v % 2 == 0, "date32": lambda v: dt.date(2000, 1, 1) + dt.timedelta(days=v % 9000)}
    items = [convert[kind](v) for v in values]
    if with_null:
        items[len(items) // 2] = None
    array = pa.array(items, type=getattr(pa, kind)()).slice(min(cut, len(items) - 1))
    read = _point_reader(array)
    assert [read(i) for i in range(len(array))] == [array[i].as_py() for i in range(len(array))]


@settings(max_examples=100, deadline=None)
@given(st.lists(U64, max_size=300), st.integers(8, 16))
def test_radix_order_is_a_stable_sort_by_the_top_bits(values, bits) -> None:
    queries = np.array(values, dtype=np.uint64)
    order = np.empty(len(queries), dtype=np.int64)
    _kernels.radix_order(queries, bits, order)
    assert order.tolist() == np.argsort(queries >> np.uint64(64 - bits), kind="stable").tolist()


@settings(max_examples=150, deadline=None)
@given(hash_columns())
def test_lower_bounds_through_the_index_equal_searchsorted(case) -> None:
    column, queries = case
    index = SegmentIndex.build(column)
    order = np.arange(len(queries), dtype=np.int64)
    out = np.empty(len(queries), dtype=np.int64)
    _kernels.lower_bounds(index.starts, index.fingerprints, column, index.shift, queries, order, out)
    assert out.tolist() == column.searchsorted(queries, side="left").tolist()
