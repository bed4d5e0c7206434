"""Filters reach the live tail of a union read (``union_read(filters=)`` and predicates on ``scan_union``): a log
table's tail batches that batch statistics rule out are not decoded; a primary-key table's tail is cut by its key
conditions only, so a change that moves a row into or out of a value filter is still folded in. Every filtered
read equals the unfiltered read filtered afterwards."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import fluss_lake as fl
from fluss_lake.exceptions import InvalidConfigError
from tiering import Lake, tier_once, union_read
from tiering.lazy_reads import scan_union

LAKE_ON = {"table.datalake.enabled": True}


def _sorted(frame: pl.DataFrame, *keys: str) -> pl.DataFrame:
    return frame.sort(*keys)


@pytest.fixture
def events(tmp_path) -> tuple[fl.Table, Lake]:
    """A log table: ids 0-29 tiered in 3 batches, then a live tail of 6 batches of 10 ids each (30-89)."""
    conn = fl.connect(str(tmp_path / "live"))
    conn.create_database("d")
    conn.create_table("d.ev", schema={"id": "INT", "kind": "STRING"},
                      options={**LAKE_ON, "table.statistics.columns": "id"})
    events = conn.get_table("d.ev")
    for j in range(3):
        events.append([{"id": 10 * j + i, "kind": f"k{i % 3}"} for i in range(10)])
    lake = Lake.for_connection(conn)
    tier_once(conn, lake)
    for j in range(3, 9):
        events.append([{"id": 10 * j + i, "kind": f"k{i % 3}"} for i in range(10)])
    return events, lake


@pytest.mark.parametrize(("filters", "predicate", "tail_batches"), [
    ([("id", "=", 45)], pl.col("id") == 45, 1),
    ([("id", ">=", 70)], pl.col("id") >= 70, 2),
    ([("id", "<", 30)], pl.col("id") < 30, 0),            # only lake rows match: no tail batch decoded
    ([[("id", "=", 5)], [("id", "=", 88)]], (pl.col("id") == 5) | (pl.col("id") == 88), 1),
    ([("kind", "=", "k1")], pl.col("kind") == "k1", 6),   # no statistics on kind: every tail batch, rows filtered
])
def test_a_log_tables_tail_skips_the_batches_a_filter_rules_out(events, decodes, filters, predicate,
                                                                  tail_batches) -> None:
    table, lake = events
    whole = union_read(table, lake).collect()
    decodes.calls.clear()
    got = union_read(table, lake, filters=filters).collect()
    assert len(decodes.calls) == tail_batches
    assert_frame_equal(_sorted(got, "id"), _sorted(whole.filter(predicate), "id"))
    decodes.calls.clear()
    lazy = scan_union(table, lake).filter(predicate).collect()  # a Polars predicate reaches the tail the same way
    assert len(decodes.calls) == tail_batches
    assert_frame_equal(_sorted(lazy, "id"), _sorted(got, "id"))


def test_a_projection_and_a_filter_decode_only_their_columns(events, decodes) -> None:
    table, lake = events
    decodes.calls.clear()
    got = scan_union(table, lake).filter(pl.col("id") == 61).select("kind").collect()
    assert got["kind"].to_list() == ["k1"]
    assert decodes.calls == [["id", "kind"]]


@pytest.fixture
def accounts(tmp_path) -> tuple[fl.Table, Lake]:
    """A primary-key table tiered, then changed live: rows moved into and out of `tier = 'gold'`, deletes, inserts."""
    conn = fl.connect(str(tmp_path / "live"))
    conn.create_database("d")
    conn.create_table("d.acc", schema={"id": "INT", "tier": "STRING", "n": "BIGINT"}, primary_key=["id"],
                      bucket_num=2, options=LAKE_ON)
    table = conn.get_table("d.acc")
    table.upsert([{"id": i, "tier": "gold" if i % 2 else "silver", "n": i} for i in range(20)])
    lake = Lake.for_connection(conn)
    tier_once(conn, lake)
    table.upsert([{"id": 1, "tier": "silver", "n": 100}, {"id": 2, "tier": "gold", "n": 200},
                  {"id": 30, "tier": "gold", "n": 300}])
    table.delete([{"id": 3}, {"id": 4}])
    return table, lake


@pytest.mark.parametrize(("filters", "predicate"), [
    ([("tier", "=", "gold")], pl.col("tier") == "gold"),         # values moved in (2, 30) and out (1, deleted 3)
    ([("id", "<", 5)], pl.col("id") < 5),                        # a key range
    ([("id", "in", [1, 3, 30]), ("tier", "=", "gold")], pl.col("id").is_in([1, 3, 30]) & (pl.col("tier") == "gold")),
    ([[("id", "=", 2)], [("n", ">", 250)]], (pl.col("id") == 2) | (pl.col("n") > 250)),
])
def test_a_primary_key_tables_tail_is_cut_only_by_key_conditions(accounts, filters, predicate) -> None:
    table, lake = accounts
    whole = union_read(table, lake).collect()
    assert_frame_equal(_sorted(whole, "id"), _sorted(table.to_polars(), "id"))  # the union is the live state
    got = union_read(table, lake, filters=filters).collect()
    assert_frame_equal(_sorted(got, "id"), _sorted(whole.filter(predicate), "id"))
    lazy = scan_union(table, lake, system_columns=True).filter(predicate).collect()
    assert_frame_equal(_sorted(lazy.drop("__bucket", "__offset", "__timestamp"), "id"), _sorted(got, "id"))


def test_bad_filters_are_refused(accounts) -> None:
    table, lake = accounts
    with pytest.raises(InvalidConfigError, match="unknown column 'nope'"):
        union_read(table, lake, filters=[("nope", "=", 1)])
    with pytest.raises(InvalidConfigError, match="operator 'like'"):
        union_read(table, lake, filters=[("tier", "like", "g%")])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.lists(st.tuples(st.integers(0, 12), st.sampled_from(["a", "b", None]), st.booleans()), max_size=25),
    column=st.sampled_from(["id", "tier"]),
    op=st.sampled_from(["=", "!=", "<", ">=", "is null"]),
    value=st.sampled_from([3, 7, "a", "b"]),
)
def test_any_tail_and_filter_give_the_unfiltered_union_filtered(tmp_path_factory, changes: list[Any], column: str,
                                                                op: str, value: Any) -> None:
    if (column == "id") != isinstance(value, int):
        value = 5 if column == "id" else "a"
    conn = fl.connect(str(tmp_path_factory.mktemp("union") / "live"))
    conn.create_database("d")
    conn.create_table("d.t", schema={"id": "INT", "tier": "STRING"}, primary_key=["id"], bucket_num=3,
                      options=LAKE_ON)
    table = conn.get_table("d.t")
    table.upsert([{"id": i, "tier": "a" if i % 3 else "b"} for i in range(10)])
    lake = Lake.for_connection(conn)
    tier_once(conn, lake)
    for key, tier, delete in changes:  # one write per change: a tail of many batches
        if delete:
            table.delete([{"id": key}])
        else:
            table.upsert([{"id": key, "tier": tier}])
    condition = (column, op) if op == "is null" else (column, op, value)
    got = union_read(table, lake, filters=[condition]).collect()
    expression = {"=": pl.col(column) == value, "!=": pl.col(column) != value, "<": pl.col(column) < value,
                  ">=": pl.col(column) >= value, "is null": pl.col(column).is_null()}[op]
    assert_frame_equal(_sorted(got, "id"), _sorted(table.to_polars().filter(expression), "id"))
