"""The merge options of a new table are checked by kv.merge (engine, delete behavior, changelog image, version
column, aggregate functions) with Fluss's messages, and MergeSpec.of reads them back from a created table."""

from __future__ import annotations

import re

import polars as pl
import pytest

from fluss_lake.exceptions import InvalidConfigError, UnsupportedMergeEngineError
from fluss_lake.kv.merge import AggSpec, MergeSpec, check_merge_options, field_aggregations
from fluss_lake.metadata.descriptor import TableDescriptor, TableInfo
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.table_path import TablePath

COLUMNS = {"id": "INT", "ts": "TIMESTAMP(3)", "d": "DOUBLE", "s": "STRING", "n": "BIGINT"}
PK = Schema.of(COLUMNS, primary_key=["id"])
LOG = Schema.of(COLUMNS)


def _check(schema: Schema, **options: str) -> None:
    check_merge_options(TableDescriptor(schema, options=options))


@pytest.mark.parametrize("options", [
    {},
    {"table.merge-engine": "first_row"},
    {"table.merge-engine": "FIRST_ROW", "table.delete.behavior": "IGNORE"},  # read normalized
    {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ts"},
    {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "n",
     "table.delete.behavior": "disable"},
    {"table.merge-engine": "aggregation", "fields.n.agg": "sum", "fields.s.agg": "listagg",
     "fields.s.listagg.delimiter": "|"},
    {"table.merge-engine": "aggregation", "table.delete.behavior": "allow", "table.changelog.image": "full"},
    {"table.delete.behavior": "disable", "table.changelog.image": "wal"},
])
def test_accepted_merge_options(options: dict[str, str]) -> None:
    _check(PK, **options)


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"table.merge-engine": "last_row"}, UnsupportedMergeEngineError, "table.merge-engine"),
    ({"table.merge-engine": "first_row", "table.delete.behavior": "allow"}, InvalidConfigError,
     "The first_row merge engine does not support table.delete.behavior='allow'"),
    ({"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ts",
      "table.delete.behavior": "allow"}, InvalidConfigError,
     "The versioned merge engine does not support table.delete.behavior='allow'"),
    ({"table.merge-engine": "aggregation", "table.changelog.image": "wal"}, InvalidConfigError,
     "table.changelog.image='WAL' is not allowed with the aggregation merge engine (its undo recovery needs full "
     "images); use 'FULL'"),
    ({"table.merge-engine": "versioned"}, InvalidConfigError,
     "the versioned merge engine needs table.merge-engine.versioned.ver-column"),
    ({"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "nope"}, InvalidConfigError,
     "table.merge-engine.versioned.ver-column='nope' is not a column"),
    ({"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "d"}, InvalidConfigError,
     "version column 'd' must be INT, BIGINT, TIMESTAMP or TIMESTAMP_LTZ, not DOUBLE"),
    ({"table.merge-engine.versioned.ver-column": "ts"}, InvalidConfigError,
     "table.merge-engine.versioned.ver-column needs table.merge-engine='versioned'"),
    ({"fields.n.agg": "sum"}, InvalidConfigError, "'fields.n.*' options need table.merge-engine='aggregation'"),
    ({"table.merge-engine": "aggregation", "fields.nope.agg": "sum"}, InvalidConfigError,
     "'fields.nope.*' names unknown column 'nope'"),
    ({"table.merge-engine": "aggregation", "fields.id.agg": "sum"}, InvalidConfigError,
     "primary-key column 'id' cannot be aggregated; drop 'fields.id.agg'"),
    ({"table.merge-engine": "aggregation", "fields.s.agg": "sum"}, InvalidConfigError, "s"),
])
def test_rejected_merge_options(options: dict[str, str], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as raised:
        _check(PK, **options)
    assert message in str(raised.value)


@pytest.mark.parametrize("key", ["table.merge-engine", "table.delete.behavior", "table.changelog.image",
                                 "table.merge-engine.versioned.ver-column"])
def test_log_tables_take_no_merge_options(key: str) -> None:
    value = {"table.merge-engine": "first_row", "table.delete.behavior": "ignore", "table.changelog.image": "full",
             "table.merge-engine.versioned.ver-column": "ts"}[key]
    with pytest.raises(InvalidConfigError, match="only allowed on primary-key tables; declare a primary key or drop"):
        _check(LOG, **{key: value})
    fields_message = re.escape("'fields.<column>.agg' options need a primary-key table with ")
    with pytest.raises(InvalidConfigError, match=fields_message):
        _check(LOG, **{"fields.n.agg": "sum"})
    _check(LOG)


def test_merge_spec_of_a_created_table() -> None:
    def spec(**options: str) -> MergeSpec:
        descriptor = TableDescriptor(PK, bucket_num=2, options=options)
        return MergeSpec.of(TableInfo.new(TablePath("d", "t"), descriptor))

    assert spec() == MergeSpec(columns=("id", "ts", "d", "s", "n"),
                               dtypes={"id": pl.Int32, "ts": pl.Datetime("ms"), "d": pl.Float64, "s": pl.String,
                                       "n": pl.Int64},
                               nullable={"id": False, "ts": True, "d": True, "s": True, "n": True},
                               primary_key=("id",), merge_engine=None, delete_behavior="allow")
    versioned = spec(**{"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ts",
                        "table.delete.behavior": "ignore"})
    assert (versioned.merge_engine, versioned.delete_behavior, versioned.version_column) == \
        ("versioned", "ignore", "ts")
    assert versioned.aggregations == {}
    aggregated = spec(**{"table.merge-engine": "aggregation", "fields.n.agg": "sum", "fields.s.agg": "listagg",
                         "fields.s.listagg.delimiter": "|"})
    assert aggregated.merge_engine == "aggregation"
    default = AggSpec("last_value_ignore_nulls")
    assert dict(aggregated.aggregations) == {"ts": default, "d": default, "s": AggSpec("listagg", {"delimiter": "|"}),
                                             "n": AggSpec("sum")}


def test_field_aggregations_only_for_the_aggregation_engine() -> None:
    options = {"fields.n.agg": "max"}
    assert field_aggregations(options, PK, None) == {}
    assert field_aggregations(options, PK, "first_row") == {}
    assert field_aggregations(options, PK, "aggregation")["n"] == AggSpec("max")
