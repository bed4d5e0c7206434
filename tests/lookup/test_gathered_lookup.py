"""A lookup of keys spread over several buckets gathers every bucket's rows into key order at once; it must give
exactly what looking each bucket's keys up on its own gives (the single-bucket path), for hits, misses,
tombstones, rows in files and in the memtable, columns added after some segments were written, and offsets."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import fluss_lake as fl
from fluss_lake.keys.bucketing import buckets_of

BUCKETS = 5


def _per_bucket(table: fl.Table, keys: pl.DataFrame, **options: bool) -> pl.DataFrame:
    """The reference: each bucket's keys looked up on their own (one bucket per call), put back in key order."""
    buckets = buckets_of(table.info, keys)
    parts, positions = [], []
    for bucket in np.unique(buckets).tolist():
        where = np.flatnonzero(buckets == bucket)
        parts.append(table.lookup(keys[where], **options))
        positions.append(where)
    order = np.argsort(np.concatenate(positions), kind="stable")
    return pl.concat(parts)[order]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["upsert", "delete", "snapshot", "add_column"]),
            st.lists(st.integers(0, 60), min_size=1, max_size=25, unique=True),
        ),
        min_size=1,
        max_size=8,
    ),
    probe=st.lists(st.integers(-5, 70), min_size=2, max_size=40),
)
def test_a_lookup_over_buckets_equals_each_bucket_on_its_own(tmp_path_factory, steps, probe):
    conn = fl.connect(str(tmp_path_factory.mktemp("store")))
    conn.create_database("d")
    conn.create_table("d.t", schema={"id": "BIGINT", "v": "STRING", "w": "DOUBLE"}, primary_key=["id"],
                      bucket_num=BUCKETS)
    table = conn.get_table("d.t")
    added = 0
    for number, (kind, ids) in enumerate(steps):
        if kind == "upsert":
            rows = {"id": ids, "v": [f"v{number}-{i}" for i in ids], "w": [i * 0.5 + number for i in ids]}
            for column in table.schema.names[3:]:
                rows[column] = [number] * len(ids)
            table.upsert(pl.DataFrame(rows))
        elif kind == "delete":
            table.delete(pl.DataFrame({"id": ids}))
        elif kind == "snapshot":
            table.snapshot()  # the state so far moves into segment files
        else:
            conn.alter_table("d.t", add_columns={f"extra{added}": "BIGINT"})
            added += 1
            table = conn.get_table("d.t")
    keys = pl.DataFrame({"id": probe}, schema={"id": pl.Int64})
    if len(np.unique(buckets_of(table.info, keys))) < 2:
        return  # one bucket: the gathered path is not taken
    for options in ({}, {"with_found": True}, {"with_offsets": True}, {"with_found": True, "with_offsets": True}):
        assert_frame_equal(table.lookup(keys, **options), _per_bucket(table, keys, **options))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["upsert", "delete", "snapshot", "add_column"]),
            st.lists(st.integers(0, 60), min_size=1, max_size=25, unique=True),
        ),
        min_size=1,
        max_size=8,
    ),
    probe=st.lists(st.integers(-5, 70), min_size=1, max_size=40),
    buckets=st.sampled_from([1, BUCKETS]),
)
def test_lookups_through_the_cached_gather_plan_equal_those_without(tmp_path_factory, steps, probe, buckets):
    """The gather plan kept per list of segments (buffer addresses worked out once) gives exactly the per-call
    gather's rows: nulls, INT and STRING columns, tombstones, files and memtable, added columns, offsets, and
    after every write (new segments, a new plan)."""
    import fluss_lake.kv.state_reader as state_reader

    conn = fl.connect(str(tmp_path_factory.mktemp("store")))
    conn.create_database("d")
    conn.create_table("d.t", schema={"id": "BIGINT", "v": "STRING", "n": "INT", "w": "DOUBLE"},
                      primary_key=["id"], bucket_num=buckets)
    table = conn.get_table("d.t")
    keys = pl.DataFrame({"id": probe}, schema={"id": pl.Int64})
    added = 0
    for number, (kind, ids) in enumerate(steps):
        if kind == "upsert":
            rows = {"id": ids, "v": [None if i % 3 == 0 else f"v{number}-{i}" for i in ids],
                    "n": [None if i % 4 == 1 else i * number for i in ids], "w": [i * 0.5 + number for i in ids]}
            for column in table.schema.names[4:]:
                rows[column] = [number] * len(ids)
            table.upsert(pl.DataFrame(rows, schema_overrides={"n": pl.Int32}))
        elif kind == "delete":
            table.delete(pl.DataFrame({"id": ids}))
        elif kind == "snapshot":
            table.snapshot()
        else:
            conn.alter_table("d.t", add_columns={f"extra{added}": "BIGINT"})
            added += 1
            table = conn.get_table("d.t")
        for options in ({"with_found": True}, {"with_found": True, "with_offsets": True}):
            planned = table.lookup(keys, **options)
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(state_reader, "_plan_of", lambda *a: None)
                assert_frame_equal(planned, table.lookup(keys, **options))


def test_the_gathered_lookup_is_the_path_taken(tmp_path, monkeypatch):
    """Several buckets' keys go through one gather (a regression here would silently bring back per-bucket frames)."""
    import fluss_lake.lookup.lookuper as lookuper

    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.t", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"], bucket_num=BUCKETS)
    table = conn.get_table("d.t")
    table.upsert(pl.DataFrame({"id": list(range(100)), "v": [str(i) for i in range(100)]}))
    from fluss_lake.kv.state_reader import StateReader

    calls, slow = [], []
    real = lookuper.lookup_buckets
    monkeypatch.setattr(lookuper, "lookup_buckets", lambda *a, **k: calls.append(len(a[0])) or real(*a, **k))
    real_slow = StateReader._slow_lookup
    monkeypatch.setattr(StateReader, "_slow_lookup", lambda *a: slow.append(1) or real_slow(*a))
    import fluss_lake.kv.state_reader as state_reader

    planned = []
    real_plan = state_reader._GatherPlan.gather_found
    monkeypatch.setattr(state_reader._GatherPlan, "gather_found",
                        lambda *a: planned.append(out := real_plan(*a)) or out)
    got = table.lookup(pl.DataFrame({"id": [99, 3, 1000, 42]}), with_found=True)
    assert planned and planned[0] is not None  # gathered from the cached plan, not column by column
    assert got["v"].to_list() == ["99", "3", None, "42"]
    assert got["_found"].to_list() == [True, True, False, True]
    assert len(calls) == 1 and calls[0] > 1
    assert not slow  # every hit resolved by the gather itself, none by the hash-collision path


@pytest.mark.parametrize("bad", [[{"id": "x"}, {"id": 2}], [{"id": None}, {"id": 1}], [{"nope": 1}, {"nope": 2}]])
def test_bad_keys_are_refused_before_any_bucket_is_read(tmp_path, bad):
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.t", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"], bucket_num=BUCKETS)
    table = conn.get_table("d.t")
    table.upsert([{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}])
    with pytest.raises(fl.FlussLakeError):
        table.lookup(bad)
    assert table.lookup([{"id": 1}, {"id": 2}, {"id": 3}])["v"].to_list() == ["a", "b", "c"]



def test_a_cached_gather_plan_does_not_keep_merged_segments_alive(tmp_path):
    """A lookup caches a gather plan holding its segments; once a flush merges those segments away, no cached plan
    may hold them (their memory and mapped files go with the store's own references). Only this table's segments
    are looked at: other tests' stores in the same process do not count."""
    import fluss_lake.kv.state_reader as state_reader

    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.t", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"], bucket_num=1)
    table = conn.get_table("d.t")
    keys = pl.DataFrame({"id": [1, 2, 3]})
    for step in range(3):
        table.upsert(pl.DataFrame({"id": [1, 2, 3], "v": [f"{step}-{i}" for i in (1, 2, 3)]}))
        assert table.lookup(keys)["v"].to_list() == [f"{step}-{i}" for i in (1, 2, 3)]
    store = table._tablets().kv_tablet(0).kv
    before = list(store.segments)  # held here: their ids stay unique until the end of the test
    mine = {id(s) for s in before}
    assert any(not mine.isdisjoint(key) for key in list(state_reader._PLANS))  # the lookups cached a plan over them
    table.snapshot()  # flushes the memtable: its segments are merged into a file segment
    merged_away = mine - {id(s) for s in store.segments}
    assert merged_away
    assert all(merged_away.isdisjoint(key) for key in list(state_reader._PLANS))  # no plan keeps one of them
    assert table.lookup(keys)["v"].to_list() == ["2-1", "2-2", "2-3"]
