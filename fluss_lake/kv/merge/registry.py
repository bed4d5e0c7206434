"""Choose and validate the row merger of a write: engine, delete behavior, target columns, merge mode."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal, cast

from fluss_lake.exceptions import InvalidConfigError, InvalidPartialUpdateError, UnsupportedMergeEngineError
from fluss_lake.kv.merge.aggregation import AggregationMerger
from fluss_lake.kv.merge.aggregators import validate_aggregation
from fluss_lake.kv.merge.first_row import FirstRowMerger
from fluss_lake.kv.merge.last_row import LastRowMerger, refuse_delete_allow
from fluss_lake.kv.merge.merge_spec import DeleteBehavior, MergeEngineName, MergeSpec
from fluss_lake.kv.merge.row_merger import MergeMode, RowMerger
from fluss_lake.kv.merge.versioned import VersionedMerger, check_version_column

__all__ = [
    "MERGE_ENGINES",
    "check_delete_behavior",
    "create_row_merger",
    "default_delete_behavior",
]

#: Values of ``table.merge-engine`` (unset = the default last-row engine).
MERGE_ENGINES: tuple[str, ...] = ("first_row", "versioned", "aggregation")
_DELETE_BEHAVIORS = ("allow", "ignore", "disable")
_MERGE_MODES = ("default", "overwrite")

_FULL_ROW_ONLY = ("first_row", "versioned")


def _engine(engine: str | None) -> str | None:
    """Return the canonical engine name, or raise :class:`UnsupportedMergeEngineError`."""
    if engine is None:
        return None
    name = engine.lower()
    if name not in MERGE_ENGINES:
        raise UnsupportedMergeEngineError(
            f"Unknown table.merge-engine={engine!r}; choose one of {', '.join(MERGE_ENGINES)}, "
            "or leave it unset for the default last-row engine."
        )
    return name


def default_delete_behavior(engine: str | None) -> Literal["allow", "ignore"]:
    """Return the ``table.delete.behavior`` Fluss writes into a new table of ``engine`` when it is unset.

    Examples
    --------
    >>> default_delete_behavior(None), default_delete_behavior("aggregation")
    ('allow', 'ignore')
    """
    return "allow" if _engine(engine) is None else "ignore"


def check_delete_behavior(engine: str | None, behavior: str) -> None:
    """Reject a ``table.delete.behavior`` the engine does not support (first_row and versioned refuse ``allow``).

    The value is read case-insensitively. Only primary-key tables may set the option; the caller checks that.

    Examples
    --------
    >>> check_delete_behavior("aggregation", "ALLOW")
    >>> try:
    ...     check_delete_behavior("first_row", "allow")
    ... except ValueError as err:
    ...     print(str(err).split(";")[0])
    The first_row merge engine does not support table.delete.behavior='allow'
    """
    name = _engine(engine)
    value = behavior.lower()
    if value not in _DELETE_BEHAVIORS:
        raise InvalidConfigError(
            f"Invalid table.delete.behavior={behavior!r}; choose one of {', '.join(_DELETE_BEHAVIORS)}."
        )
    if name in _FULL_ROW_ONLY:
        refuse_delete_allow(name, value)


def _check_aggregations(spec: MergeSpec, engine: str | None) -> None:
    """Validate ``fields.<col>.agg`` declarations against the engine, the key and the column types."""
    if spec.aggregations and engine != "aggregation":
        raise InvalidConfigError(
            f"Aggregate functions are declared for columns {sorted(spec.aggregations)}, but "
            f"table.merge-engine is {engine or 'unset (last row)'}; set table.merge-engine='aggregation' "
            "or remove the fields.<col>.agg options."
        )
    for column, agg in spec.aggregations.items():
        if column not in spec.dtypes:
            raise InvalidConfigError(
                f"fields.{column}.agg names a column that does not exist; columns are {list(spec.columns)}."
            )
        if column in spec.primary_key:
            raise InvalidConfigError(
                f"fields.{column}.agg is set on primary-key column {column!r}; primary-key columns are never "
                "aggregated, remove the option."
            )
        validate_aggregation(column, spec.dtypes[column], agg)


def _check_targets(
    spec: MergeSpec, engine: str | None, target_columns: Sequence[str] | None, merge_mode: MergeMode
) -> tuple[str, ...] | None:
    """Validate a partial update's target columns; return them in table order, or None for a full-row write."""
    if target_columns is None:
        return None
    unknown = [c for c in target_columns if c not in spec.dtypes]
    if unknown:
        raise InvalidPartialUpdateError(
            f"Target columns {unknown} do not exist in the table; columns are {list(spec.columns)}."
        )
    targets = set(target_columns)
    missing_pk = [c for c in spec.primary_key if c not in targets]
    if missing_pk:
        raise InvalidPartialUpdateError(
            f"The target write columns {list(target_columns)} must contain the primary key columns "
            f"{list(spec.primary_key)}; add {missing_pk}."
        )
    if targets >= set(spec.columns):
        return None  # covers every column: a plain full-row write
    if merge_mode == "default" and engine in _FULL_ROW_ONLY:
        raise InvalidPartialUpdateError(
            f"The {engine} merge engine does not support partial updates; write full rows (no target columns)."
        )
    not_null = [c for c in spec.columns if c not in spec.primary_key and not spec.nullable.get(c, True)]
    if not_null:
        raise InvalidPartialUpdateError(
            f"Partial update requires every non-primary-key column to be nullable, but {not_null} are NOT NULL; "
            "make those columns nullable or write full rows."
        )
    return tuple(c for c in spec.columns if c in targets)


_FACTORIES: dict[str | None, Callable[[MergeSpec, tuple[str, ...] | None], RowMerger]] = {
    None: lambda spec, targets: LastRowMerger(spec, target_columns=targets),
    "first_row": lambda spec, targets: FirstRowMerger(spec),
    "versioned": lambda spec, targets: VersionedMerger(spec),
    "aggregation": lambda spec, targets: AggregationMerger(spec, target_columns=targets),
}


def create_row_merger(
    spec: MergeSpec,
    *,
    target_columns: Sequence[str] | None = None,
    merge_mode: MergeMode = "default",
) -> RowMerger:
    """Return the row merger for one write of a primary-key table, after validating the configuration.

    Parameters
    ----------
    spec
        The table's merge description (engine, delete behavior, version column, aggregate functions).
    target_columns
        Columns of a partial update (must include the primary key); ``None`` or every column = full rows.
    merge_mode
        ``"default"`` applies the engine; ``"overwrite"`` (undo recovery) bypasses it: a last-row merger whose
        deletes are always applied and whose target columns are replaced, never aggregated.

    Raises
    ------
    UnsupportedMergeEngineError
        ``spec.merge_engine`` is not an engine.
    InvalidConfigError
        Bad delete behavior, version column, aggregate function or merge mode.
    InvalidPartialUpdateError
        Unknown target column, target columns without the full primary key, a partial update on first_row or
        versioned, or a NOT NULL non-key column.

    Examples
    --------
    >>> import polars as pl
    >>> from fluss_lake.kv.merge import MergeSpec
    >>> spec = MergeSpec(columns=("k", "v"), dtypes={"k": pl.Int32, "v": pl.String},
    ...                  nullable={"k": False, "v": True}, primary_key=("k",),
    ...                  merge_engine="first_row", delete_behavior="ignore")
    >>> type(create_row_merger(spec)).__name__
    'FirstRowMerger'
    >>> type(create_row_merger(spec, merge_mode="overwrite")).__name__
    'LastRowMerger'
    """
    if merge_mode not in _MERGE_MODES:
        raise InvalidConfigError(f"Unknown merge mode {merge_mode!r}; choose one of {', '.join(_MERGE_MODES)}.")
    engine = _engine(spec.merge_engine)
    check_delete_behavior(engine, spec.delete_behavior)
    behavior = cast(DeleteBehavior, spec.delete_behavior.lower())
    if (engine, behavior) != (spec.merge_engine, spec.delete_behavior):
        spec = dataclasses.replace(spec, merge_engine=cast(MergeEngineName | None, engine), delete_behavior=behavior)
    _check_aggregations(spec, engine)
    if engine == "versioned":
        check_version_column(spec)
    targets = _check_targets(spec, engine, target_columns, merge_mode)
    if merge_mode == "overwrite":
        return LastRowMerger(spec, target_columns=targets, delete_behavior="allow")
    return _FACTORIES[engine](spec, targets)
