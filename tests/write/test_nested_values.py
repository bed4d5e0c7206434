"""ROW and ARRAY values from plain Python follow the same cast rules as top-level columns, and lose nothing.

An integer field of a dict into ``ROW<zip INT>`` is cast safely (as an integer column is); a field only some rows
give is kept (Polars alone infers a struct from the first dict and drops the other rows' extra fields); values that
do not fit, unknown fields and mixed kinds are refused with the field named, and a rejected batch changes nothing.
"""

from __future__ import annotations

import polars as pl
import pytest

import fluss_lake as fl

ADDRESS = pl.Struct({"zip": pl.Int32, "city": pl.String})


@pytest.fixture
def table(tmp_path) -> fl.Table:
    conn = fl.connect(str(tmp_path / "store"))
    conn.create_database("d")
    conn.create_table("d.people", schema={"id": "INT", "addr": ADDRESS, "tags": pl.List(pl.Int16)}, primary_key=["id"])
    people = conn.get_table("d.people")
    people.upsert([{"id": 0, "addr": {"zip": 10, "city": "a"}, "tags": [0]}])
    return people


def test_dict_rows_are_cast_like_top_level_values_and_keep_every_field(table: fl.Table) -> None:
    table.upsert([
        {"id": 1, "addr": {"zip": 1}, "tags": [1, 2]},  # Python ints into INT / SMALLINT, like top-level columns
        {"id": 2, "addr": None, "tags": None},  # a null ROW stays null
        {"id": 3, "addr": {"zip": 7, "city": "x"}, "tags": []},  # a field the first row did not give
    ])
    rows = {r["id"]: r for r in table.to_polars().to_dicts()}
    assert rows[1] == {"id": 1, "addr": {"zip": 1, "city": None}, "tags": [1, 2]}
    assert rows[2] == {"id": 2, "addr": None, "tags": None}
    assert rows[3] == {"id": 3, "addr": {"zip": 7, "city": "x"}, "tags": []}
    assert table.to_polars().schema["addr"] == ADDRESS


@pytest.mark.parametrize(("rows", "message"), [
    ([{"id": 9, "addr": {"zip": 2**40}, "tags": []}], "column 'addr.zip': values do not fit INT"),
    ([{"id": 9, "addr": {"zip": 1, "street": "s"}, "tags": []}], r"has field\(s\) \['street'\] it lacks"),
    ([{"id": 9, "addr": {"zip": "a"}, "tags": []}], "column 'addr.zip' is INT but the data is String"),
    ([{"id": 9, "addr": None, "tags": [70_000]}], r"column 'tags\[\]': values do not fit SMALLINT"),
    ([{"id": 9, "addr": 5, "tags": []}, {"id": 8, "addr": {"zip": 1}, "tags": []}], "rows mix values of types"),
])
def test_nested_values_that_do_not_fit_are_refused_and_change_nothing(table: fl.Table, rows, message) -> None:
    before = (table.to_polars(), table.end_offsets())
    with pytest.raises(fl.SchemaMismatchError, match=message):
        table.upsert(rows)
    assert table.to_polars().equals(before[0]) and table.end_offsets() == before[1]


def test_rows_of_a_polars_frame_with_a_narrower_struct_are_widened_safely(table: fl.Table) -> None:
    frame = pl.DataFrame({"id": [5], "addr": [{"zip": 5}], "tags": [[5]]},
                         schema={"id": pl.Int32, "addr": pl.Struct({"zip": pl.Int64}), "tags": pl.List(pl.Int64)})
    table.upsert(frame)
    assert table.lookup([{"id": 5}]).to_dicts() == [{"id": 5, "addr": {"zip": 5, "city": None}, "tags": [5]}]
