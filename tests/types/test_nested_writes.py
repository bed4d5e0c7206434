"""Nested columns (ARRAY, MAP, ROW, vectors) through writes, lookups, scans, changelogs and partial updates, and
bad nested input refused with the table left exactly as it was."""

from __future__ import annotations

import re

import polars as pl
import pyarrow as pa
import pytest

import fluss_lake as fl

SCHEMA = {
    "id": "INT",
    "tags": "ARRAY<STRING>",
    "attrs": "MAP<STRING, ARRAY<DOUBLE>>",
    "addr": "ROW<zip INT NOT NULL, lines ARRAY<STRING>>",
    "emb": pl.Array(pl.Float32, 3),
    "n": "BIGINT",
}
ROW_1 = {"id": 1, "tags": ["a", "b"], "attrs": {"x": [1.0, 2.5], "y": []},
         "addr": {"zip": 10, "lines": ["l1"]}, "emb": [0.5, 1.0, 1.5], "n": 1}
ROW_2 = {"id": 2, "tags": None, "attrs": None, "addr": None, "emb": None, "n": 2}


@pytest.fixture
def table(tmp_path) -> fl.Table:
    conn = fl.connect(str(tmp_path / "store"))
    conn.create_database("d")
    conn.create_table("d.t", schema=SCHEMA, primary_key=["id"])
    t = conn.get_table("d.t")
    t.upsert([ROW_1, ROW_2])
    return t


def test_nested_values_come_back_intact_from_scans_lookups_and_a_reopened_store(table: fl.Table, tmp_path) -> None:
    assert table.lookup([{"id": 1}, {"id": 2}]).to_dicts() == [ROW_1, ROW_2]
    frame = fl.connect(str(tmp_path / "store")).get_table("d.t").to_polars().sort("id")
    assert frame.to_dicts() == [ROW_1, ROW_2]
    assert frame.schema["emb"] == pl.Array(pl.Float32, 3) and frame.schema["attrs"] == pl.Map(
        pl.String, pl.List(pl.Float64))


def test_arrow_and_polars_inputs_of_every_nested_kind_are_accepted(table: fl.Table) -> None:
    arrow = pa.table({
        "id": pa.array([3], pa.int32()),
        "tags": pa.array([["z"]], pa.list_(pa.string())),
        "attrs": pa.array([[("k", [9.0])]], pa.map_(pa.string(), pa.list_(pa.float64()))),
        "addr": pa.array([{"zip": 3, "lines": None}], pa.struct([("zip", pa.int64()), ("lines", pa.list_(pa.string()))])),
        "emb": pa.array([[1.0, 2.0, 3.0]], pa.list_(pa.float64(), 3)),  # doubles into FLOAT: cast as columns are
        "n": pa.array([3], pa.int64()),
    })
    table.upsert(arrow)
    assert table.lookup([{"id": 3}]).to_dicts() == [
        {"id": 3, "tags": ["z"], "attrs": {"k": [9.0]}, "addr": {"zip": 3, "lines": None}, "emb": [1.0, 2.0, 3.0],
         "n": 3}]


def test_changelog_rows_carry_nested_before_and_after_images(table: fl.Table) -> None:
    table.upsert([{**ROW_1, "attrs": {"x": [7.0]}, "emb": [3.0, 2.0, 1.0]}])
    log = table.changelog().filter(pl.col("id") == 1)
    assert log["_change_type"].to_list() == ["insert", "update_before", "update_after"]
    assert log["attrs"].to_list() == [ROW_1["attrs"], ROW_1["attrs"], {"x": [7.0]}]
    assert log["emb"].to_list() == [ROW_1["emb"], ROW_1["emb"], [3.0, 2.0, 1.0]]


def test_partial_update_of_nested_non_key_columns_keeps_the_others(table: fl.Table) -> None:
    table.upsert([{"id": 1, "addr": {"zip": 99, "lines": []}, "emb": [9.0, 9.0, 9.0]}],
                 target_columns=["id", "addr", "emb"])
    assert table.lookup([{"id": 1}]).to_dicts() == [
        {**ROW_1, "addr": {"zip": 99, "lines": []}, "emb": [9.0, 9.0, 9.0]}]


@pytest.mark.parametrize(("row", "message"), [
    ({"emb": [1.0, 2.0]}, r"column 'emb' is a vector of 3 values .* length\(s\) \[2\]"),
    ({"emb": [1.0, 2.0, 3.0, 4.0]}, r"vector of 3 values .* length\(s\) \[4\]"),
    ({"attrs": {None: [1.0]}}, "Map keys cannot be null"),
    ({"attrs": {"x": "no list"}}, "values do not fit MAP<STRING, ARRAY<DOUBLE>>"),
    ({"attrs": {"x": ["s"]}}, "values do not fit MAP<STRING, ARRAY<DOUBLE>>"),
    ({"addr": {"lines": ["only lines"]}}, r"'addr.zip' is NOT NULL but has null value\(s\)"),
    ({"addr": {"zip": 1, "street": "s"}}, r"has field\(s\) \['street'\] it lacks"),
    ({"addr": {"zip": "not an int"}}, "column 'addr.zip': values do not form one type"),
    ({"tags": "not a list"}, r"column 'tags' is ARRAY<STRING> but the rows mix values of types \['list', 'str'\]"),
    ({"tags": [1, 2]}, "column 'tags': values do not form one type"),
])
def test_bad_nested_values_are_refused_and_the_table_is_unchanged(table: fl.Table, row, message) -> None:
    before = (table.to_polars().sort("id"), table.end_offsets(), table.changelog().height)
    with pytest.raises(fl.SchemaMismatchError, match=message):
        table.upsert([{**ROW_2, "id": 9, **row}, {**ROW_1, "id": 8}])  # a good row beside it is not written either
    assert table.to_polars().sort("id").equals(before[0])
    assert (table.end_offsets(), table.changelog().height) == before[1:]


def test_a_null_map_key_from_arrow_data_and_a_wrong_width_polars_array_are_refused(table: fl.Table) -> None:
    before = table.to_polars().sort("id")
    entries = pa.array([[{"key": None, "value": [1.0]}]],
                       pa.list_(pa.struct([("key", pa.string()), ("value", pa.list_(pa.float64()))])))
    with pytest.raises(fl.SchemaMismatchError, match="null map key"):
        table.upsert(pa.table({"id": pa.array([5], pa.int32()), "attrs": entries}), target_columns=["id", "attrs"])
    wide = pl.DataFrame({"id": [5], "emb": [[1.0, 2.0, 3.0, 4.0]]},
                        schema={"id": pl.Int32, "emb": pl.Array(pl.Float32, 4)})
    with pytest.raises(fl.SchemaMismatchError, match="vector of 3 values"):
        table.upsert(wide, target_columns=["id", "emb"])
    assert table.to_polars().sort("id").equals(before)


def test_not_null_elements_are_checked_in_log_tables_too(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.log", schema={"v": "ARRAY<INT NOT NULL>", "m": "MAP<STRING, INT NOT NULL>"})
    log = conn.get_table("d.log")
    log.append([{"v": [1, 2], "m": {"a": 1}}, {"v": None, "m": None}])  # a null ARRAY itself is allowed
    for bad, path in (({"v": [1, None], "m": None}, "v[]"), ({"v": [], "m": {"a": None}}, "m[value]")):
        with pytest.raises(fl.SchemaMismatchError, match=re.escape(f"'{path}' is NOT NULL")):
            log.append([bad])
    assert log.to_polars().to_dicts() == [{"v": [1, 2], "m": {"a": 1}}, {"v": None, "m": None}]
