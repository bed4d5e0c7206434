"""The on-disk primary-key state: compaction keeps the newest version of every key, tombstones hide keys,
state survives reopening, schema evolution pads old segments, and hash collisions between distinct keys are
resolved by comparing the keys (forced here with a deliberately weak hash)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fluss_lake as fl
from fluss_lake.keys import index_hash as key_index
from fluss_lake.kv import kv_tablet
from fluss_lake.lookup import lookuper


def _table(tmp_path, name="t", **kwargs) -> fl.Table:
    conn = fl.connect(tmp_path, **kwargs)
    conn.create_database("d", ignore_if_exists=True)
    conn.create_table(f"d.{name}", schema={"id": "BIGINT", "v": "STRING", "n": "INT"}, primary_key=["id"])
    return conn.get_table(f"d.{name}")


def test_many_small_writes_compact_and_keep_newest(tmp_path) -> None:
    table = _table(tmp_path)
    rng = np.random.default_rng(1)
    expected: dict[int, tuple[str, int]] = {}
    for step in range(120):
        keys = rng.integers(0, 3000, 200)
        frame = pl.DataFrame({"id": keys, "v": [f"s{step}"] * len(keys), "n": np.arange(len(keys), dtype=np.int32)})
        table.upsert(frame)
        for i, k in enumerate(keys.tolist()):
            expected[k] = (f"s{step}", i)
        if step % 10 == 9:
            dead = rng.integers(0, 3000, 50)
            table.delete(pl.DataFrame({"id": dead}))
            for k in dead.tolist():
                expected.pop(k, None)
    segments = table._tablets().kv_tablet(0).kv.segments
    assert len(segments) < 20, "runs of same-size segments must have been merged"
    state = table.to_polars().sort("id")
    want = pl.DataFrame({"id": list(expected), "v": [v for v, _ in expected.values()],
                         "n": [n for _, n in expected.values()]}, schema=table.schema.polars_schema).sort("id")
    assert state.equals(want)
    probe = pl.DataFrame({"id": np.arange(0, 3000, 7)})
    looked = table.new_lookup().lookup(probe, with_found=True)
    assert looked.get_column("_found").to_list() == [k in expected for k in range(0, 3000, 7)]
    reopened = fl.connect(tmp_path).get_table("d.t")
    assert reopened.to_polars().sort("id").equals(want)


def test_state_survives_without_any_snapshot(tmp_path) -> None:
    table = _table(tmp_path, snapshot_every=10**9)
    table.upsert([{"id": 1, "v": "a", "n": 1}, {"id": 2, "v": "b", "n": 2}])
    table.delete([{"id": 1}])
    assert not list(tmp_path.glob("**/snapshots/*.json"))
    reopened = fl.connect(tmp_path).get_table("d.t")
    assert reopened.to_polars().to_dicts() == [{"id": 2, "v": "b", "n": 2}]


def test_schema_evolution_pads_old_segments(tmp_path) -> None:
    table = _table(tmp_path)
    table.upsert([{"id": 1, "v": "a", "n": 1}])
    conn = table.connection
    conn.alter_table("d.t", add_columns={"extra": "DOUBLE"})
    table = conn.get_table("d.t")
    table.upsert([{"id": 2, "v": "b", "n": 2, "extra": 0.5}])
    table.upsert([{"id": 1, "extra": 1.5}], target_columns=["id", "extra"])
    assert table.to_polars().sort("id").to_dicts() == [{"id": 1, "v": "a", "n": 1, "extra": 1.5},
                                                      {"id": 2, "v": "b", "n": 2, "extra": 0.5}]
    fresh = fl.connect(tmp_path).get_table("d.t")
    assert fresh.lookup([{"id": 1}]).to_dicts() == [{"id": 1, "v": "a", "n": 1, "extra": 1.5}]


@pytest.fixture
def weak_hash(monkeypatch):
    """Every key hashes to one of 4 values: collisions everywhere (test instrumentation, not a mock of storage)."""
    real = key_index.index_hashes

    def weak(frame, primary_key, prefix_key=()):
        return real(frame, primary_key, prefix_key) % np.uint64(4)

    monkeypatch.setattr(key_index, "index_hashes", weak)
    monkeypatch.setattr(kv_tablet, "index_hashes", weak)
    monkeypatch.setattr(lookuper, "index_hashes", weak)
    return weak


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30), st.integers(0, 9)), min_size=1, max_size=60),
       st.integers(1, 6))
def test_hash_collisions_are_resolved_by_key(weak_hash, tmp_path_factory, ops, per_batch) -> None:
    table = _table(tmp_path_factory.mktemp("c"))
    expected: dict[int, int] = {}
    for start in range(0, len(ops), per_batch):
        writer = table.new_upsert()
        for is_delete, key, value in ops[start:start + per_batch]:
            if is_delete:
                writer.delete([{"id": key}])
                expected.pop(key, None)
            else:
                writer.upsert([{"id": key, "v": str(value), "n": value}])
                expected[key] = value
        writer.flush()
    state = table.to_polars().sort("id")
    assert state.select("id", "n").to_dicts() == [{"id": k, "n": expected[k]} for k in sorted(expected)]
    looked = table.new_lookup().lookup(pl.DataFrame({"id": list(range(31))}), with_found=True)
    assert looked.get_column("_found").to_list() == [k in expected for k in range(31)]
    assert looked.get_column("n").to_list() == [expected.get(k) for k in range(31)]


@pytest.mark.parametrize("key", ["string", "two integers"])
def test_hash_collisions_in_memtable_merges_are_resolved_by_key(weak_hash, tmp_path, key) -> None:
    """Memtable merges compare the keys behind repeated hashes: in numpy for integer keys of several columns, as
    frames for other keys; distinct keys sharing a hash all survive, a key's newest row wins."""
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    schema = {"id": "STRING", "n": "INT"} if key == "string" else {"id": "BIGINT", "k": "INT", "n": "INT"}
    pk = ["id"] if key == "string" else ["id", "k"]
    conn.create_table("d.t", schema=schema, primary_key=pk)
    table = conn.get_table("d.t")
    rng = np.random.default_rng(3)
    expected: dict[tuple, int] = {}
    for step in range(40):  # 40 batches: the memtable merges runs of them many times
        ids = rng.integers(0, 12, 5)
        ks = rng.integers(-2, 2, 5).astype(np.int32)
        rows = {(str(i) if key == "string" else int(i), int(k)): step * 10 + j for j, (i, k) in enumerate(zip(ids, ks))}
        if key == "string":
            rows = {(i, 0): v for (i, _), v in rows.items()}
            frame = pl.DataFrame({"id": [i for i, _ in rows], "n": list(rows.values())},
                                 schema={"id": pl.String, "n": pl.Int32})
        else:
            frame = pl.DataFrame({"id": [i for i, _ in rows], "k": [k for _, k in rows], "n": list(rows.values())},
                                 schema={"id": pl.Int64, "k": pl.Int32, "n": pl.Int32})
        table.upsert(frame)
        expected.update(rows)
    assert len(table._tablets().kv_tablet(0).kv.segments) < 40  # merges happened
    state = table.to_polars()
    got = {(r["id"], r.get("k", 0)): r["n"] for r in state.to_dicts()}
    assert got == expected


def test_lazy_state_equals_eager_state(tmp_path) -> None:
    table = _table(tmp_path)
    for step in range(9):
        table.upsert(pl.DataFrame({"id": np.arange(step * 50, step * 50 + 300), "v": [f"s{step}"] * 300,
                                   "n": np.full(300, step, dtype=np.int32)}))
        table.delete(pl.DataFrame({"id": [step * 7]}))
    assert len(table._tablets().kv_tablet(0).kv.segments) > 1
    lazy = table.to_lazy()
    assert isinstance(lazy, pl.LazyFrame)
    assert lazy.collect().sort("id").equals(table.to_polars().sort("id"))
    assert table.to_lazy(columns=["id"]).collect().height == table.to_polars().height


def test_snapshot_collects_old_orphaned_segments_only(tmp_path) -> None:
    import os
    import time

    table = _table(tmp_path, snapshot_every=1)
    table.upsert([{"id": 1, "v": "a", "n": 1}])
    directory = table._tablets().kv_tablet(0).shared_dir  # the store's folder of published segments
    old, fresh = os.path.join(directory, "seg-crashed-writer.arrow"), os.path.join(directory, "seg-other-process.arrow")
    for path in (old, fresh):
        with open(path, "wb") as handle:
            handle.write(b"left behind")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    table.upsert([{"id": 2, "v": "b", "n": 2}])  # snapshot_every=1: snapshots and collects
    assert not os.path.exists(old)
    assert os.path.exists(fresh)
    live = {s.name for s in table._tablets().kv_tablet(0).kv.segments}
    assert live <= set(os.listdir(directory)), "the snapshot published every live segment"
    assert fl.connect(tmp_path).get_table("d.t").to_polars().height == 2


def test_commit_times_are_kept_only_where_table_kv_ttl_needs_them(tmp_path) -> None:
    """Segments of a table without ``table.kv.ttl`` carry no ``__ts`` column (8 bytes per row less to write and
    merge); segments that have one (written by a TTL store) still merge and read correctly in a store without."""
    from fluss_lake.kv.kv_store import TS_COLUMN, KvStore

    schema = pl.Schema({"id": pl.Int64, "v": pl.Int64})

    def write(store: KvStore, ids: list[int], value: int) -> None:
        frame = pl.DataFrame({"id": ids, "v": [value] * len(ids)})
        store.apply(key_index.index_hashes(frame, ["id"]), frame, np.zeros(len(ids), dtype=bool), 1_000)
        store.flush_memtable()

    timed = KvStore(str(tmp_path / "timed"), schema, ("id",), ttl_ms=3_600_000, clock=lambda: 2_000)
    write(timed, [1, 2, 3], 10)
    assert TS_COLUMN in timed.segments[0].table.column_names
    plain = KvStore(str(tmp_path / "plain"), schema, ("id",))
    write(plain, [7], 1)
    assert TS_COLUMN not in plain.segments[0].table.column_names
    plain.adopt([*plain.segments, *timed.segments])  # an older segment with commit times underneath
    write(plain, [2, 8], 20)
    plain.compact_all()
    assert [TS_COLUMN in s.table.column_names for s in plain.segments] == [False]
    keys = pl.DataFrame({"id": [1, 2, 3, 7, 8, 9]})
    found, rows = plain.lookup(key_index.index_hashes(keys, ["id"]), keys)
    assert found.tolist() == [True, True, True, True, True, False]
    assert rows.get_column("v").to_list() == [10, 20, 10, 1, 20, None]
