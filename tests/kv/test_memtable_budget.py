"""The process-wide memtable budget: all memtables of the process together stay under it, flushes keep every row,
and the state after a reopen is the same."""

from __future__ import annotations

import threading

import numpy as np
import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.keys.index_hash import index_hashes
from fluss_lake.kv import memtable_budget
from fluss_lake.kv.kv_store import KvStore

SCHEMA = pl.Schema({"id": pl.Int64, "v": pl.String})


@pytest.fixture
def budget():
    """Set a small budget for one test, restore the old one after."""
    old = memtable_budget.limit_bytes()
    yield memtable_budget.set_limit_bytes
    memtable_budget.set_limit_bytes(old)


def _apply(store: KvStore, ids: np.ndarray, tag: str) -> None:
    rows = pl.DataFrame({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)
    store.apply(index_hashes(rows, ("id",)), rows, np.zeros(len(ids), dtype=bool), 1)


def _two_stores_one_byte_over(tmp_path, budget, large: str, small: str) -> tuple[KvStore, KvStore]:
    """A store with 20,000 memtable rows and one with 1,000, under a budget one byte below their sum (so the
    next write must flush something)."""
    budget(1 << 30)
    stores = KvStore(str(tmp_path / large), SCHEMA, ("id",)), KvStore(str(tmp_path / small), SCHEMA, ("id",))
    _apply(stores[0], np.arange(20_000), large[0])
    _apply(stores[1], np.arange(1_000), small[0])
    budget(stores[0].memtable_bytes + stores[1].memtable_bytes - 1)
    return stores


def test_budget_bounds_the_memtables_of_all_stores(tmp_path, budget) -> None:
    budget(256 << 10)
    stores = [KvStore(str(tmp_path / f"s{i}"), SCHEMA, ("id",)) for i in range(4)]
    expected: list[dict[int, str]] = [{} for _ in stores]
    rng = np.random.default_rng(1)
    for step in range(60):
        i = step % len(stores)
        ids = np.unique(rng.integers(0, 20_000, 2_000))
        _apply(stores[i], ids, f"s{step}-")
        expected[i].update({int(k): f"s{step}-{k}" for k in ids})
        assert sum(s.memtable_bytes for s in stores) <= memtable_budget.limit_bytes()
    assert any(s.segments and s.segments[-1].on_disk for s in stores)  # the budget did flush
    for store, rows in zip(stores, expected):
        assert dict(store.scan().iter_rows()) == rows  # flushes kept every row, newest version wins


def test_largest_memtable_is_flushed_first(tmp_path, budget) -> None:
    big, small = _two_stores_one_byte_over(tmp_path, budget, "big", "small")
    _apply(small, np.arange(1_000, 1_010), "s")  # the small store writes, the big one is flushed
    assert big.memtable_bytes == 0 and [s.on_disk for s in big.segments] == [True]
    assert small.memtable_bytes > 0 and not small.segments[0].on_disk


def test_busy_store_is_skipped_and_the_writer_flushes_itself(tmp_path, budget) -> None:
    busy, writer = _two_stores_one_byte_over(tmp_path, budget, "busy", "w")
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with busy.lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    try:
        _apply(writer, np.arange(1_000, 1_010), "w")  # waits at most _LOCK_WAIT for the busy store, then skips it
    finally:
        release.set()
        thread.join()
    assert busy.memtable_bytes > 0 and writer.memtable_bytes == 0
    assert writer.scan().height == 1_010


def test_state_after_reopen_is_identical(tmp_path, budget) -> None:
    budget(64 << 10)
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    conn.create_table("d.t", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"], bucket_num=3)
    conn.create_table("d.u", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"], bucket_num=2)
    t, u = conn.get_table("d.t"), conn.get_table("d.u")
    rng = np.random.default_rng(5)
    for step in range(20):
        for table in (t, u):
            ids = np.unique(rng.integers(0, 5_000, 800))
            table.upsert(pl.DataFrame({"id": ids, "v": [f"{step}-{i}" for i in ids]}))
        gone = np.unique(rng.integers(0, 5_000, 50))
        t.delete(pl.DataFrame({"id": gone}))
    assert memtable_budget.total_bytes() <= memtable_budget.limit_bytes()
    before = {name: conn.get_table(name).to_polars().sort("id") for name in ("d.t", "d.u")}
    reopened = fl.connect(tmp_path)
    for name, frame in before.items():
        assert reopened.get_table(name).to_polars().sort("id").equals(frame)
        keys = frame.select("id")
        assert reopened.get_table(name).lookup(keys).sort("id").equals(frame)


def test_budget_must_be_positive() -> None:
    with pytest.raises(InvalidConfigError):
        memtable_budget.set_limit_bytes(0)


def test_threads_writing_different_tables_share_the_budget(tmp_path, budget) -> None:
    # Each thread's writes may flush the other table's memtables (their locks are only tried): no deadlock, no
    # lost row.
    budget(32 << 10)
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    for name in ("a", "b"):
        conn.create_table(f"d.{name}", schema={"id": "BIGINT", "v": "BIGINT"}, primary_key=["id"], bucket_num=2)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            table = conn.get_table(f"d.{name}")
            for step in range(30):
                ids = np.arange(step * 100, step * 100 + 300)
                table.upsert(pl.DataFrame({"id": ids, "v": np.full(len(ids), step)}))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    expected = pl.DataFrame({"id": np.arange(0, 29 * 100 + 300), "v": np.minimum(np.arange(0, 3200) // 100, 29)})
    for name in ("a", "b"):
        assert conn.get_table(f"d.{name}").to_polars().sort("id").equals(expected)
        assert fl.connect(tmp_path).get_table(f"d.{name}").to_polars().sort("id").equals(expected)
