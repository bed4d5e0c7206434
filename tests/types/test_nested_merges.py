"""Merge engines on nested columns: last-row, first_row, versioned and aggregation with the functions Fluss allows on
every type (last_value, last_value_ignore_nulls, first_value...); sum/max/listagg on nested refused at creation."""

from __future__ import annotations

import re

import polars as pl
import pytest

import fluss_lake as fl

SCHEMA = {"id": "INT", "ver": "BIGINT", "m": "MAP<STRING, INT>", "r": "ROW<a INT, b ARRAY<STRING>>",
          "emb": pl.Array(pl.Float32, 2)}


def make(tmp_path, options: dict) -> fl.Table:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.t", schema=SCHEMA, primary_key=["id"], options=options)
    return conn.get_table("d.t")


FIRST = {"id": 1, "ver": 1, "m": {"a": 1}, "r": {"a": 1, "b": ["x"]}, "emb": [1.0, 1.0]}
SECOND = {"id": 1, "ver": 2, "m": None, "r": {"a": 2, "b": []}, "emb": [2.0, 2.0]}


@pytest.mark.parametrize(("options", "expected"), [
    ({}, SECOND),
    ({"table.merge-engine": "first_row"}, FIRST),
    ({"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ver"}, SECOND),
    ({"table.merge-engine": "aggregation", "fields.m.agg": "last_value", "fields.r.agg": "first_value",
      "fields.emb.agg": "last_value_ignore_nulls"}, {**SECOND, "r": FIRST["r"]}),
    ({"table.merge-engine": "aggregation"}, {**SECOND, "m": FIRST["m"]}),  # default: last_value_ignore_nulls
])
def test_merge_engines_keep_nested_values_whole(tmp_path, options: dict, expected: dict) -> None:
    table = make(tmp_path, options)
    table.upsert([FIRST])
    table.upsert([SECOND])
    assert table.lookup([{"id": 1}]).to_dicts() == [expected]
    after = table.changelog().filter(pl.col("_change_type") != "update_before").tail(1)
    if options.get("table.merge-engine") != "first_row":  # first_row emits nothing for the second write
        assert after.select(list(SCHEMA)).to_dicts() == [expected]


@pytest.mark.parametrize(("column", "function", "shown"), [
    ("m", "sum", "MAP<STRING, INT>"), ("r", "max", "ROW<a INT, b ARRAY<STRING>>"), ("emb", "sum", "ARRAY<FLOAT>"),
    ("emb", "min", "ARRAY<FLOAT>"), ("r", "listagg", "ROW<"), ("m", "bool_or", "MAP<"),
])
def test_numeric_and_ordered_aggregates_on_nested_columns_are_refused_at_creation(
    tmp_path, column, function, shown
) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    message = f"Aggregate function '{function}' of column '{column}' does not accept type {re.escape(shown)}"
    with pytest.raises(fl.InvalidConfigError, match=message):
        conn.create_table("d.t", schema=SCHEMA, primary_key=["id"],
                          options={"table.merge-engine": "aggregation", f"fields.{column}.agg": function})
    assert conn.list_tables("d") == []
