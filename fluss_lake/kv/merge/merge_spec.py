"""What a merge engine knows about its table: columns, primary key, engine, delete behavior, version column and
aggregate functions, read once from the table's validated options (:meth:`MergeSpec.of`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

import polars as pl

from fluss_lake import options as opt
from fluss_lake.metadata.descriptor import TableInfo
from fluss_lake.metadata.schema import Schema

__all__ = ["DEFAULT_AGG_FUNCTION", "AggSpec", "DeleteBehavior", "MergeEngineName", "MergeSpec", "field_aggregations"]

MergeEngineName = Literal["first_row", "versioned", "aggregation"]
DeleteBehavior = Literal["allow", "ignore", "disable"]

#: Function of a non-key column that declares none (``fields.<col>.agg`` unset).
DEFAULT_AGG_FUNCTION = "last_value_ignore_nulls"


@dataclass(frozen=True, slots=True)
class AggSpec:
    """One column's aggregate function (``fields.<col>.agg``) and its parameters (``fields.<col>.<fn>.<p>``)."""

    function: str
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MergeSpec:
    """What a merger needs to know about the table; built from the validated table descriptor."""

    columns: tuple[str, ...]  # every column, in table order
    dtypes: Mapping[str, pl.DataType]
    nullable: Mapping[str, bool]
    primary_key: tuple[str, ...]
    merge_engine: MergeEngineName | None = None  # None = default (last row, partial update)
    delete_behavior: DeleteBehavior = "allow"
    version_column: str | None = None  # table.merge-engine.versioned.ver-column
    # non-PK columns without an entry: DEFAULT_AGG_FUNCTION
    aggregations: Mapping[str, AggSpec] = field(default_factory=dict)

    @classmethod
    def of(cls, info: TableInfo) -> MergeSpec:
        """The spec of a created table, from its current schema and its normalized options (an unset
        ``table.delete.behavior`` reads as ``allow``).

        Examples
        --------
        >>> from fluss_lake.metadata.descriptor import TableDescriptor
        >>> from fluss_lake.metadata.table_path import TablePath
        >>> schema = Schema.of({"id": "INT", "n": "BIGINT"}, primary_key=["id"])
        >>> descriptor = TableDescriptor(schema, options={"table.merge-engine": "aggregation",
        ...                                               "table.delete.behavior": "ignore", "fields.n.agg": "sum"})
        >>> spec = MergeSpec.of(TableInfo.new(TablePath("d", "t"), descriptor))
        >>> spec.merge_engine, spec.delete_behavior, spec.aggregations["n"].function
        ('aggregation', 'ignore', 'sum')
        """
        schema, options = info.schema, info.options
        engine = options.get(opt.MERGE_ENGINE)
        return cls(
            columns=schema.names,
            dtypes={c.name: c.dtype for c in schema.columns},
            nullable={c.name: c.nullable for c in schema.columns},
            primary_key=schema.primary_key,
            merge_engine=cast(MergeEngineName | None, engine),
            delete_behavior=cast(DeleteBehavior, options.get(opt.DELETE_BEHAVIOR, "allow")),
            version_column=options.get(opt.VERSIONED_VER_COLUMN),
            aggregations=field_aggregations(options, schema, engine),
        )


def field_aggregations(options: Mapping[str, str], schema: Schema, engine: str | None) -> dict[str, AggSpec]:
    """Per-column AggSpec of an aggregation table (columns without one get the default function); empty for
    other engines.

    Examples
    --------
    >>> schema = Schema.of({"id": "INT", "n": "BIGINT", "s": "STRING"}, primary_key=["id"])
    >>> aggs = field_aggregations({"fields.s.agg": "listagg", "fields.s.listagg.delimiter": "|"}, schema,
    ...                           "aggregation")
    >>> {column: (spec.function, dict(spec.params)) for column, spec in aggs.items()}
    {'n': ('last_value_ignore_nulls', {}), 's': ('listagg', {'delimiter': '|'})}
    """
    if engine != "aggregation":
        return {}
    grouped = opt.field_options(options)
    result = {}
    for column in schema.names:
        if column in schema.primary_key:
            continue
        fopts = grouped.get(column, {})
        result[column] = AggSpec(
            fopts.get("agg", DEFAULT_AGG_FUNCTION), {k.split(".", 1)[1]: v for k, v in fopts.items() if k != "agg"}
        )
    return result
