"""The segment merge policy of the KV store: flushes of similar or varying size always merge in runs of FANOUT,
rows are rewritten a logarithmic number of times, and big merges (written column by column) give the same
segments."""

from __future__ import annotations

import os

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_lake.keys.index_hash import index_hashes
from fluss_lake.kv import compactor, kv_store, segment_merge
from fluss_lake.kv.kv_store import KvStore

SCHEMA = pl.Schema({"id": pl.Int64, "v": pl.String})


@pytest.fixture(autouse=True)
def inline_merges():
    """The policy is checked merge by merge: merges run inline here (tests/kv/test_compactor.py covers the
    background compactor)."""
    compactor.set_enabled(False)
    yield
    compactor.set_enabled(True)


def _apply(store: KvStore, ids: np.ndarray, tag: str, ts: int) -> None:
    rows = pl.DataFrame({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)
    store.apply(index_hashes(rows, ("id",)), rows, np.zeros(len(ids), dtype=bool), ts)


def test_flushes_straddling_a_tier_boundary_still_merge(tmp_path, monkeypatch) -> None:
    # Flushes of 1,000 and 1,100 rows: with fixed tier boundaries near that size they fell in two tiers that
    # alternated, so no run of four same-tier segments formed and segments piled up.
    monkeypatch.setattr(kv_store, "_MIN_TIER_ROWS", 16)
    store = KvStore(str(tmp_path), SCHEMA, ("id",))
    expected: dict[int, str] = {}
    next_id = 0
    for flush in range(24):
        size = 1000 if flush % 2 else 1100
        ids = np.arange(next_id, next_id + size)
        next_id += size
        _apply(store, ids, "a", flush)
        store.flush_memtable()
        expected.update({int(i): f"a{i}" for i in ids})
    file_segments = [s for s in store.segments if s.on_disk]
    # 24 flushes with FANOUT 4: at most FANOUT - 1 segments per size class, classes grow by 4x
    assert len(file_segments) <= 2 * (kv_store._FANOUT - 1), [s.rows for s in file_segments]
    assert store._find_run() is None
    assert dict(store.scan().iter_rows()) == expected


def test_flushes_of_varying_size_merge_logarithmically(tmp_path, monkeypatch) -> None:
    # Flushes forced by the process memtable budget vary in size, and snapshots flush a few rows: every row is
    # still rewritten a logarithmic number of times and the segments a lookup probes stay few.
    monkeypatch.setattr(kv_store, "_MIN_TIER_ROWS", 16)
    written = [0]
    write_segment = segment_merge.write_segment

    def counting(directory, frame, **kwargs):
        written[0] += frame.num_rows
        return write_segment(directory, frame, **kwargs)

    monkeypatch.setattr(segment_merge, "write_segment", counting)
    store = KvStore(str(tmp_path), SCHEMA, ("id",))
    rng = np.random.default_rng(11)
    next_id, most = 0, 0
    for flush in range(300):
        size = 3 if flush % 7 == 6 else int(rng.integers(200, 800))
        _apply(store, np.arange(next_id, next_id + size), "a", flush)
        next_id += size
        store.flush_memtable()
        most = max(most, len(store.segments))
    rewrites = written[0] / next_id  # 1.0: each row written once, at its flush
    # about log4(150k / 500) ~ 4 merge levels; fixed tiers sized for big flushes rewrote these rows ~50 times
    assert rewrites <= 8, rewrites
    assert most <= 3 * (kv_store._FANOUT - 1) + 4, most
    assert store.row_count() == next_id


def test_updates_and_deletes_survive_tiered_merges(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(kv_store, "MEMTABLE_ROWS", 512)
    store = KvStore(str(tmp_path), SCHEMA, ("id",))
    rng = np.random.default_rng(7)
    expected: dict[int, str] = {}
    for step in range(40):
        ids = np.unique(rng.integers(0, 3000, 400))
        _apply(store, ids, f"s{step}-", step)
        expected.update({int(i): f"s{step}-{i}" for i in ids})
        gone = np.unique(rng.integers(0, 3000, 30))
        rows = pl.DataFrame({"id": gone, "v": [None] * len(gone)}, schema=SCHEMA)
        store.apply(index_hashes(rows, ("id",)), rows, np.ones(len(gone), dtype=bool), step)
        for i in gone:
            expected.pop(int(i), None)
    assert dict(store.scan().iter_rows()) == expected
    store.compact_all()
    assert len(store.segments) == 1 and not store.segments[0].tomb.any()
    assert dict(store.scan().iter_rows()) == expected


def test_big_merges_written_column_by_column_give_the_same_segments(tmp_path, monkeypatch) -> None:
    # Merges of at least _SPILL_MERGE_ROWS rows take one column at a time through temporary mapped files: same rows,
    # same single-batch segment files, no temporary file left.
    monkeypatch.setattr(kv_store, "MEMTABLE_ROWS", 256)
    stores = {}
    for name, spill_rows in (("plain", 10**9), ("spilled", 1)):
        monkeypatch.setattr(segment_merge, "_SPILL_MERGE_ROWS", spill_rows)
        store = KvStore(str(tmp_path / name), SCHEMA, ("id",))
        rng = np.random.default_rng(3)
        for step in range(30):
            _apply(store, np.unique(rng.integers(0, 2000, 300)), f"s{step}-", step)
            gone = np.unique(rng.integers(0, 2000, 20))
            rows = pl.DataFrame({"id": gone, "v": [None] * len(gone)}, schema=SCHEMA)
            store.apply(index_hashes(rows, ("id",)), rows, np.ones(len(gone), dtype=bool), step)
        store.compact_all()
        stores[name] = store
    plain, spilled = stores["plain"], stores["spilled"]
    assert plain.scan().sort("id").equals(spilled.scan().sort("id"))
    assert [s.rows for s in plain.segments] == [s.rows for s in spilled.segments] == [plain.row_count()]
    segment = spilled.segments[0]
    assert pa.ipc.open_file(pa.memory_map(segment.path)).num_record_batches == 1
    assert segment.table.equals(plain.segments[0].table)
    assert not [n for n in os.listdir(tmp_path / "spilled") if n.startswith(".tmp")]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), max_size=30), min_size=1, max_size=8))
def test_merge_order_equals_a_stable_argsort_of_the_runs(runs) -> None:
    """The k-way merge of sorted runs (newest first) orders equal hashes newest run first, like the stable sort
    it replaces (small values: many equal hashes across and within runs)."""
    arrays = [np.sort(np.array(r, dtype=np.uint64)) for r in runs]
    order, merged = segment_merge._merge_order(arrays)
    concatenated = np.concatenate(arrays)
    assert order.tolist() == np.argsort(concatenated, kind="stable").tolist()
    assert merged.tolist() == sorted(concatenated.tolist())
