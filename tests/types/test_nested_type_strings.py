"""Fluss nested type strings parse recursively, round-trip to string, Arrow and Polars, persist in table metadata,
and keep NOT NULL markers; nested types are refused as primary-key or bucket-key columns (as in Fluss)."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest

import fluss_lake as fl
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.types import arrow_type_name, parse_type, to_polars_dtype

ROUND_TRIP = [
    ("ARRAY<ROW<a INT, b ARRAY<STRING>>>", pl.List(pl.Struct({"a": pl.Int32, "b": pl.List(pl.String)}))),
    ("MAP<STRING, ARRAY<DOUBLE>>", pl.Map(pl.String, pl.List(pl.Float64))),
    ("ROW<a INT NOT NULL, `b c` DECIMAL(10,2)>", pl.Struct({"a": pl.Int32, "b c": pl.Decimal(10, 2)})),
    ("ARRAY<FLOAT NOT NULL>", pl.List(pl.Float32)),
    ("MAP<INT, ROW<x BIGINT, y MAP<STRING, TIMESTAMP_LTZ(3)>>>",
     pl.Map(pl.Int32, pl.Struct({"x": pl.Int64, "y": pl.Map(pl.String, pl.Datetime("ms", "UTC"))}))),
    ("ARRAY<ARRAY<BOOLEAN>>", pl.List(pl.List(pl.Boolean))),
    ("ARRAY<FLOAT>(768)", pl.Array(pl.Float32, 768)),  # a vector: the length after the ARRAY
    ("ROW<id BIGINT, emb ARRAY<DOUBLE NOT NULL>(3)>", pl.Struct({"id": pl.Int64, "emb": pl.Array(pl.Float64, 3)})),
    ("ARRAY<ARRAY<INT>(2)>(3)", pl.Array(pl.Int32, (3, 2))),
]


@pytest.mark.parametrize(("text", "dtype"), ROUND_TRIP)
def test_type_strings_round_trip_to_string_polars_and_arrow(text: str, dtype: pl.DataType) -> None:
    kind, nullable = parse_type(text)
    assert nullable and arrow_type_name(kind) == text
    assert to_polars_dtype(text) == dtype
    assert to_polars_dtype(kind) == dtype  # the Arrow type gives the same Polars dtype
    assert arrow_type_name(parse_type(text.lower())[0]) == text  # keywords in any case


def test_a_trailing_not_null_makes_the_column_not_null_and_lowercase_row_parentheses_parse() -> None:
    schema = Schema.of({"id": "INT", "v": "row(a int, b array<string not null>) NOT NULL"})
    assert not schema.column("v").nullable and schema.column("id").nullable
    assert schema.column("v").type_name == "ROW<a INT, b ARRAY<STRING NOT NULL>>"


@pytest.mark.parametrize(("text", "message"), [
    ("ARRAY<INT", "expected >"),
    ("ARRAY", "ARRAY needs its element types"),
    ("MAP<INT>", "expected ,"),
    ("ROW<a INT, a STRING>", "name a field twice"),
    ("ARRAY<INT>>", "unexpected '>'"),
    ("ARRAY<INT NOT>", "expected NULL after NOT"),
    ("ARRAY<FOO>", "unknown column type 'FOO'"),
    ("ARRAY<FLOAT>(0)", "a length of at least 1, got 0"),
    ("ARRAY<FLOAT>(4", "expected \\)"),
    ("ARRAY<FLOAT>(x)", "expected number"),
    ("MAP<STRING, INT>(4)", "unexpected '\\('"),
])
def test_malformed_type_strings_are_refused_with_the_problem_named(tmp_path, text: str, message: str) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    with pytest.raises(fl.InvalidTableError, match=message):
        conn.create_table("d.t", schema={"id": "INT", "v": text})
    assert conn.list_tables("d") == []


def test_nested_schema_persists_in_table_metadata_and_reads_back_equal(tmp_path) -> None:
    columns = {
        "id": "BIGINT",
        "tags": "ARRAY<STRING NOT NULL>",
        "attrs": "MAP<STRING, ARRAY<DOUBLE>>",
        "addr": "ROW<zip INT NOT NULL, lines ARRAY<STRING>>",
        "emb": pa.list_(pa.float32(), 4),  # a vector: ARRAY<FLOAT>(4)
    }
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.t", schema=columns, primary_key=["id"])
    again = fl.connect(str(tmp_path)).get_table("d.t").schema
    assert again == conn.get_table("d.t").schema
    assert [c.type_name for c in again.columns] == [
        "BIGINT", "ARRAY<STRING NOT NULL>", "MAP<STRING, ARRAY<DOUBLE>>", "ROW<zip INT NOT NULL, lines ARRAY<STRING>>",
        "ARRAY<FLOAT>(4)",
    ]
    assert again.column("emb").vector_dimension == 4 and again.column("emb").dtype == pl.Array(pl.Float32, 4)
    assert again.arrow_schema.field("attrs").type == pa.map_(pa.large_string(), pa.large_list(pa.float64()))
    assert Schema.from_json(again.to_json()) == again


def test_adding_a_nested_column_keeps_its_type_and_refuses_not_null(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.t", schema={"id": "INT"}, primary_key=["id"])
    conn.alter_table("d.t", add_columns={"m": "MAP<STRING, ROW<a INT NOT NULL>>"})
    assert fl.connect(str(tmp_path)).get_table("d.t").schema.column("m").type_name == "MAP<STRING, ROW<a INT NOT NULL>>"
    with pytest.raises(fl.InvalidAlterError, match="cannot be added as NOT NULL"):
        conn.alter_table("d.t", add_columns={"n": "ARRAY<INT> NOT NULL"})
    assert conn.get_table("d.t").schema.names == ("id", "m")


@pytest.mark.parametrize(("kind", "keys"), [
    ("ARRAY<INT>", {"primary_key": ["k"]}),
    ("MAP<STRING, INT>", {"primary_key": ["k"]}),
    ("ROW<a INT>", {"primary_key": ["k"]}),
    (pl.Array(pl.Float32, 2), {"primary_key": ["k"]}),
    ("MAP<STRING, INT>", {"bucket_keys": ["k"]}),
])
def test_nested_columns_cannot_be_primary_or_bucket_keys(tmp_path, kind, keys) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    with pytest.raises(fl.InvalidTableError, match="cannot be a primary-key or bucket-key column"):
        conn.create_table("d.t", schema={"k": kind, "v": "INT"}, **keys)
    assert conn.list_tables("d") == []


def test_a_demo_table_spec_with_nested_not_null_types_matches_its_stored_table(tmp_path) -> None:
    from assets.tables import LiveTableSpec, schema_differences

    spec = LiveTableSpec("t", {"id": "BIGINT", "v": "array<row<a int not null>>", "m": "MAP<STRING, DOUBLE>"}, "t",
                         primary_key=("id",))
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.t", schema=dict(spec.schema), primary_key=["id"])
    assert schema_differences(spec, conn.get_table("d.t")) == []
    other = LiveTableSpec("t", {**spec.schema, "v": "ARRAY<ROW<a INT>>"}, "t", primary_key=("id",))
    assert schema_differences(other, conn.get_table("d.t")) == [
        "column v: ARRAY<ROW<a INT NOT NULL>> != declared ARRAY<ROW<a INT>>"]
