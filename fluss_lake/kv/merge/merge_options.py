"""The merge options of a table, checked when it is created: merge engine, delete behavior, changelog image,
version column and aggregate functions (``fields.<col>.agg``), with Fluss's rules and messages."""

from __future__ import annotations

import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.kv.merge.aggregators import validate_aggregation
from fluss_lake.kv.merge.merge_spec import DEFAULT_AGG_FUNCTION, AggSpec
from fluss_lake.kv.merge.registry import check_delete_behavior, default_delete_behavior
from fluss_lake.metadata.descriptor import TableDescriptor

__all__ = ["check_merge_options"]

#: Types a versioned table's version column may have (INT, BIGINT, TIMESTAMP, TIMESTAMP_LTZ).
_VERSION_TYPES = (pl.Int32, pl.Int64, pl.Datetime)
#: Options only a primary-key table may set.
_PK_ONLY = (opt.MERGE_ENGINE, opt.DELETE_BEHAVIOR, opt.CHANGELOG_IMAGE, opt.VERSIONED_VER_COLUMN)


def check_merge_options(descriptor: TableDescriptor) -> None:
    """Reject merge options the table may not have (the checks :meth:`TableDescriptor.validated` makes).

    A log table may set none of them (nor ``fields.<col>.*``). A primary-key table's delete behavior must suit
    its engine (unset: the engine's default, see :func:`default_delete_behavior`), an aggregation table keeps
    full changelog images, a versioned table names an INT, BIGINT or TIMESTAMP version column (and only a
    versioned one names any), and ``fields.<col>.*`` options need the aggregation engine, an existing non-key
    column and a function that column's type supports. The options are read normalized
    (:func:`fluss_lake.options.normalize_options`).

    Raises
    ------
    UnsupportedMergeEngineError
        ``table.merge-engine`` is not an engine.
    InvalidConfigError
        Any other rule above is broken.

    Examples
    --------
    >>> from fluss_lake.metadata.schema import Schema
    >>> schema = Schema.of({"id": "INT", "v": "STRING"}, primary_key=["id"])
    >>> check_merge_options(TableDescriptor(schema, options={"table.merge-engine": "first_row"}))
    >>> try:
    ...     check_merge_options(TableDescriptor(schema, options={"fields.v.agg": "listagg"}))
    ... except ValueError as err:
    ...     print(err)
    'fields.v.*' options need table.merge-engine='aggregation'
    """
    options = opt.normalize_options(descriptor.options)
    schema = descriptor.schema
    if not schema.primary_key:
        for key in _PK_ONLY:
            if key in options:
                raise InvalidConfigError(
                    f"{key} is only allowed on primary-key tables; declare a primary key or drop the option"
                )
        if any(k.startswith("fields.") for k in options):
            raise InvalidConfigError(
                f"'fields.<column>.agg' options need a primary-key table with {opt.MERGE_ENGINE}='aggregation'"
            )
        return
    engine = options.get(opt.MERGE_ENGINE)
    check_delete_behavior(engine, options.get(opt.DELETE_BEHAVIOR) or default_delete_behavior(engine))
    if engine == "aggregation" and options.get(opt.CHANGELOG_IMAGE) == "wal":
        raise InvalidConfigError(
            f"{opt.CHANGELOG_IMAGE}='WAL' is not allowed with the aggregation merge "
            "engine (its undo recovery needs full images); use 'FULL'"
        )
    version_column = options.get(opt.VERSIONED_VER_COLUMN)
    if engine == "versioned":
        if version_column is None:
            raise InvalidConfigError(f"the versioned merge engine needs {opt.VERSIONED_VER_COLUMN}")
        if version_column not in schema.names:
            raise InvalidConfigError(f"{opt.VERSIONED_VER_COLUMN}={version_column!r} is not a column")
        if not isinstance(schema.column(version_column).dtype, _VERSION_TYPES):
            raise InvalidConfigError(
                f"version column {version_column!r} must be INT, BIGINT, TIMESTAMP or "
                f"TIMESTAMP_LTZ, not {schema.column(version_column).type_name}"
            )
    elif version_column is not None:
        raise InvalidConfigError(f"{opt.VERSIONED_VER_COLUMN} needs {opt.MERGE_ENGINE}='versioned'")
    for column, fopts in opt.field_options(options).items():
        if engine != "aggregation":
            raise InvalidConfigError(f"'fields.{column}.*' options need {opt.MERGE_ENGINE}='aggregation'")
        if column not in schema.names:
            raise InvalidConfigError(f"'fields.{column}.*' names unknown column {column!r}")
        if column in schema.primary_key:
            raise InvalidConfigError(f"primary-key column {column!r} cannot be aggregated; drop 'fields.{column}.agg'")
        function = fopts.get("agg", DEFAULT_AGG_FUNCTION)
        params = {k.split(".", 1)[1]: v for k, v in fopts.items() if k != "agg"}
        validate_aggregation(column, schema.column(column).dtype, AggSpec(function, params))
