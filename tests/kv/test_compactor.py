"""The background compactor: merges of file segments run off the write path and change nothing a reader sees;
the segments converge to the same logarithmic layout as inline merges; a merge that loses its run to a full
compaction is dropped (no lost or resurrected row, no leftover file); a write stall bounds the segment count."""

from __future__ import annotations

import os
import threading

import numpy as np
import polars as pl
import pytest

from fluss_lake.keys.index_hash import index_hashes
from fluss_lake.kv import compactor, kv_store
from fluss_lake.kv.kv_store import KvStore

SCHEMA = pl.Schema({"id": pl.Int64, "v": pl.Int64})


def _write(store: KvStore, ids: np.ndarray, value: int, deleted: bool = False) -> None:
    rows = pl.DataFrame({"id": ids, "v": np.full(len(ids), value)}, schema=SCHEMA)
    with store.lock:
        store.apply(index_hashes(rows, ("id",)), rows, np.full(len(ids), deleted), 1)


def _check(store: KvStore, model: dict[int, int], probe: np.ndarray) -> None:
    keys = pl.DataFrame({"id": probe})
    with store.lock:
        found, rows = store.lookup(index_hashes(keys, ("id",)), keys)
    want = [model.get(int(k)) for k in probe]
    assert found.tolist() == [w is not None for w in want]
    assert rows.get_column("v").to_list() == want


@pytest.mark.parametrize("background", [True, False])
def test_lookups_during_background_merges_equal_a_model(tmp_path, monkeypatch, background) -> None:
    monkeypatch.setattr(kv_store, "_MIN_TIER_ROWS", 16)
    monkeypatch.setattr(kv_store, "MEMTABLE_ROWS", 300)  # flush often: many merges run while we write and read
    compactor.set_enabled(background)
    try:
        store = KvStore(str(tmp_path), SCHEMA, ("id",))
        rng = np.random.default_rng(5)
        model: dict[int, int] = {}
        for step in range(150):
            ids = np.unique(rng.integers(0, 5_000, 120))
            if step % 7 == 6:
                _write(store, ids, 0, deleted=True)
                for k in ids.tolist():
                    model.pop(k, None)
            else:
                _write(store, ids, step)
                model.update({k: step for k in ids.tolist()})
            if step % 10 == 0:
                _check(store, model, rng.integers(0, 5_000, 400))  # while merges may be in flight
        store.wait_for_compaction()
        _check(store, model, np.arange(5_000))
        assert len(store.segments) <= 12, [s.rows for s in store.segments]
        assert store.row_count() == len(model)
    finally:
        compactor.set_enabled(True)


def test_a_merge_that_loses_its_run_to_a_full_compaction_is_dropped(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(kv_store, "_MIN_TIER_ROWS", 16)
    store = KvStore(str(tmp_path), SCHEMA, ("id",))
    request = compactor.request
    monkeypatch.setattr(compactor, "request", lambda _store: None)  # four same-size files, not merged yet
    for value in range(4):
        _write(store, np.arange(value * 100, value * 100 + 100), value)
        with store.lock:
            store.flush_memtable()
    assert [s.rows for s in store.segments] == [100] * 4
    original = store._merged
    started, release = threading.Event(), threading.Event()

    def slow_merged(run, **kw):  # hold the background merge until the full compaction has replaced its run
        if threading.current_thread().name == "fluss-lake-compactor":
            started.set()
            release.wait(10)
        return original(run, **kw)

    monkeypatch.setattr(store, "_merged", slow_merged)
    request(store)
    assert started.wait(10)
    with store.lock:
        store.compact_all()
    release.set()
    store.wait_for_compaction()
    assert [s.rows for s in store.segments] == [400]
    names = {os.path.basename(s.path) for s in store.segments}
    retired = {os.path.basename(s.path) for s in store.retired}
    on_disk = {n for n in os.listdir(tmp_path) if n.startswith("seg-")}
    assert on_disk == names | retired, "the dropped merge result was deleted"
    _check(store, {k: k // 100 for k in range(400)}, np.arange(400))


def test_a_write_stall_merges_inline_when_segments_pile_up(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(kv_store, "_MIN_TIER_ROWS", 16)
    monkeypatch.setattr(kv_store, "_MAX_SEGMENTS", 3)
    requested: list[KvStore] = []
    monkeypatch.setattr(compactor, "request", requested.append)  # a compactor that never gets to run
    store = KvStore(str(tmp_path), SCHEMA, ("id",))
    for value in range(12):
        _write(store, np.arange(value * 10, value * 10 + 10), value)
        with store.lock:
            store.flush_memtable()
    assert requested, "below the stall limit merges were left to the compactor"
    assert len(store.segments) <= 4, [s.rows for s in store.segments]
